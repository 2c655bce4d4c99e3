"""Baselines and verdicts in a run: --hpml-compare fails the tests whose metrics regressed,
--hpml-save-baseline stores the run's measurements (a pytest plugin module).

The baseline file is read before any test runs, for a comparison and for a save alike: a
damaged file stops the run at once, naming the file, instead of after hours of GPU work.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from pytest_hpml.compare import baselines, confirm, verdicts
from pytest_hpml.machine.fingerprint import fingerprint, machine_key, software_changes
from pytest_hpml.policy import non_negative, path_option, positive
from pytest_hpml.report.files import Output, writable_problem
from pytest_hpml.results import Record
from pytest_hpml.selection import profile_of
from pytest_hpml.session import OUTER_RUN_ONLY, HpmlRun, is_controller, outer_run_only, run_of


class Comparison:
    """This run's baseline options and the baseline file, read once."""

    def __init__(self, config: pytest.Config, run: HpmlRun) -> None:
        opt = config.option
        self.run = run
        self.profile = profile_of(config)
        self.compare: bool = opt.hpml_compare
        self.save: bool = opt.hpml_save_baseline
        self.keep: int = opt.hpml_baseline_runs
        self.reset: bool = opt.hpml_reset_baseline
        self.confirm: int = opt.hpml_confirm
        self.processes: int = opt.hpml_baseline_processes
        self.tolerance: float = opt.hpml_tolerance
        self.alpha: float = opt.hpml_alpha
        self.directory = Path(opt.hpml_baselines or Path(config.rootpath, "baselines"))
        self.baseline: baselines.Baseline | None = None
        # Fresh processes that failed (a rerun that fails its own checks confirms nothing),
        # "nodeid: what happened": those of the test being judged, carried on its report, and
        # all of the run's, gathered by the controller and said once at the end.
        self.new_rerun_failures: list[str] = []
        self.rerun_failures: list[str] = []

    # The machine's identity asks torch about GPUs: only runs that compare or save pay for it.
    @property
    def machine(self) -> str:
        return machine_key(fingerprint())

    @property
    def path(self) -> Path:
        return baselines.baseline_path(self.directory, self.machine, self.profile)

    def open(self) -> None:
        """Check the folder and read the file before any test runs; raises pytest.UsageError
        naming what is wrong (a save that cannot happen is said now, not after the tests)."""
        if self.directory.exists() and not self.directory.is_dir():
            raise pytest.UsageError(f"--hpml-baselines={self.directory} is a file; the option "
                                    "takes a folder (baseline files are named by machine and "
                                    "profile inside it)")
        if self.save:
            problem = writable_problem(self.directory, folder=True) or (
                writable_problem(self.path) if self.directory.is_dir() else None)
            if problem:
                raise pytest.UsageError(f"--hpml-save-baseline: cannot save in "
                                        f"--hpml-baselines={self.directory}: {problem}")
        try:
            found = baselines.load(self.path)
        except baselines.BaselineError as exc:
            raise pytest.UsageError(str(exc)) from None
        if found is None:
            if self.compare:
                self.run.say_once(
                    f"--hpml-compare: no baseline for this machine ({self.machine}) and profile "
                    f"{self.profile!r} at {self.path}; every metric is 'new'. Record one "
                    "with --hpml-save-baseline.")
        elif machine_key(found.fingerprint) != self.machine:
            elsewhere = (f"{found.path} was recorded on {machine_key(found.fingerprint)!r}, "
                         f"not on this machine ({self.machine!r})")
            if self.save:
                raise pytest.UsageError(
                    f"--hpml-save-baseline: {elsewhere}; a save never overwrites another "
                    "machine's baseline. Move the file away, or point --hpml-baselines at "
                    "another folder.")
            self.run.say_once(f"--hpml-compare: {elsewhere}: not compared.")
            found = None
        else:
            changes = software_changes(found.fingerprint, fingerprint())
            if changes and self.compare:
                self.run.say_once("--hpml-compare: software changed since the baseline: "
                                  + "; ".join(changes))
        self.baseline = found

    def _compare(self, record: Record, can_confirm: int) -> None:
        old = self.baseline.metrics_for(record.id) if self.baseline else {}
        record.metrics = [m for m in record.metrics if verdicts.outcome(m) != "missing"]
        record.metrics.extend(verdicts.compare_record(record, old, self.tolerance, self.alpha,
                                                      can_confirm))

    def measure_again(self, item: pytest.Item, records: list[Record], processes: int,
                      why: str) -> None:
        """Run the test in `processes` fresh processes and give each measured metric its
        values from them (Metric.runs)."""
        reruns, problems = confirm.rerun(item, self.profile, processes, OUTER_RUN_ONLY)
        self.new_rerun_failures += [f"{item.nodeid}: {p}" for p in problems]
        for record in records:
            measured = confirm.metrics_by_name(reruns, record.id)
            for m in record.metrics:
                again = measured.get(m.name, [])
                if not m.compared or not again:
                    continue
                m.runs = [*(m.runs or []), *(x.value for x in again)]
                relative = [x.relative for x in again]
                if m.relative is not None and None not in relative:
                    m.relative_runs = [*(m.relative_runs or []), *relative]
            record.warnings += [f"{why}: {p}" for p in problems]

    def judge(self, item: pytest.Item, records: list[Record], may_confirm: bool = True
              ) -> list[str]:
        """Fill verdicts in place, confirming suspected regressions in fresh processes first
        (not for a test that failed anyway); returns one line per metric that fails.

        Fresh processes run one at a time, up to --hpml-confirm: all of them while they show
        the change, and no more once one brings it back within the tolerance (a suspicion the
        next process dispels costs one)."""
        left = self.confirm if may_confirm else 0
        for record in records:
            self._compare(record, can_confirm=left)
        suspected = [r for r in records if verdicts.suspects(r)]
        while suspected and left:
            self.measure_again(item, suspected, 1, "confirmation")
            left -= 1
            for record in suspected:
                self._compare(record, can_confirm=left)
            suspected = [r for r in suspected if verdicts.suspects(r)]
        return [line for r in records for line in verdicts.failures(r, self.tolerance)]

    def widen_history(self, item: pytest.Item, records: list[Record]) -> None:
        """A save measures in fresh processes too, so that the baseline knows this machine's
        between-run spread from the first save (a comparison's confirmations count)."""
        extra = self.processes - 1
        pending = [r for r in records if any(m.compared and not m.runs for m in r.metrics)]
        if extra > 0 and pending:
            self.measure_again(item, pending, extra, "baseline process")

    def write(self) -> list[Path]:
        records = self.run.records
        passed = [r for r in records if r.id not in self.run.failed_ids]
        if len(passed) < len(records):
            self.run.say_once(f"--hpml-save-baseline: {len(records) - len(passed)} row(s) of "
                              "tests that did not pass (failed, xfail, or an error in teardown) "
                              "not saved; their previous baseline entries are kept.")
        if not passed:
            return []
        saved = baselines.save(self.path, fingerprint(), self.profile, passed,
                               keep=self.keep, reset=self.reset)
        if saved.skipped:
            self.run.say_once(f"--hpml-save-baseline: {len(saved.skipped)} metric(s) are not "
                              "finite numbers and were not saved: " + "; ".join(saved.skipped[:5])
                              + (" ..." if len(saved.skipped) > 5 else ""))
        return [self.path]  # a symlink is shown with the file it links to


COMPARISON_KEY = pytest.StashKey[Comparison]()
#: Fresh processes behind a failing verdict: with the suspect run, three process medians,
#: enough to estimate the spread between processes.
DEFAULT_CONFIRMATIONS = 2
#: Processes behind a saved baseline: three medians are the fewest that give a spread.
DEFAULT_BASELINE_PROCESSES = 3


def significance(text: str) -> float:
    """An argparse type: a significance level, a probability strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(
            f"{text!r}: the significance level is a probability between 0 and 1 (exclusive); "
            f"typical values are 0.01 (the default) and 0.05")
    return value


def fraction(text: str) -> float:
    """An argparse type: a fraction in [0, 10), with a message that says so."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a number; give a fraction such as 0.1 for 10 %") from None
    if not 0 <= value < 10:
        raise argparse.ArgumentTypeError(f"{text!r} is out of range; give a fraction such as 0.1")
    return value


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hpml", "pytest-hpml: timing, baselines and reports")
    group.addoption("--hpml-compare", action="store_true",
                    help="compare with this machine's baseline; fail tests whose metrics regressed")
    group.addoption("--hpml-save-baseline", action="store_true",
                    help="merge this run's results into this machine's baseline file")
    group.addoption("--hpml-baselines", metavar="DIR", default=None, type=path_option,
                    help="folder of baseline files (default: <rootdir>/baselines)")
    group.addoption("--hpml-baseline-runs", type=positive(int), default=baselines.DEFAULT_KEEP,
                    metavar="N", help="runs of history a baseline keeps per metric, so the "
                    f"run-to-run spread is known ({baselines.DEFAULT_KEEP})")
    group.addoption("--hpml-baseline-processes", type=positive(int),
                    default=DEFAULT_BASELINE_PROCESSES, metavar="N",
                    help="processes a save measures each test in (the run's own and N-1 fresh "
                         "ones), so the first baseline already knows the spread between "
                         f"processes ({DEFAULT_BASELINE_PROCESSES}; 1: the run alone)")
    group.addoption("--hpml-reset-baseline", action="store_true",
                    help="with --hpml-save-baseline: restart the history of the saved rows "
                         "instead of appending to it (after a hardware or driver change)")
    group.addoption("--hpml-tolerance", type=fraction, default=verdicts.DEFAULT_TOLERANCE,
                    metavar="FRACTION", help="default relative change before a metric counts as "
                    f"changed ({verdicts.DEFAULT_TOLERANCE})")
    group.addoption("--hpml-alpha", type=significance, default=verdicts.DEFAULT_ALPHA, metavar="P",
                    help="significance level of a verdict: a change must be this unlikely "
                         f"under the noise this machine has shown ({verdicts.DEFAULT_ALPHA})")
    group.addoption("--hpml-confirm", type=non_negative(int), default=DEFAULT_CONFIRMATIONS,
                    metavar="N",
                    help="fresh processes that measure a suspected regression again before it "
                         f"fails the test ({DEFAULT_CONFIRMATIONS}; 0: decide from the run "
                         "alone)")
    # The comparison and the save are the outer run's: a rerun only measures.
    outer_run_only("--hpml-compare", "--hpml-save-baseline", "--hpml-baselines",
                   "--hpml-baseline-runs", "--hpml-baseline-processes", "--hpml-reset-baseline",
                   "--hpml-tolerance", "--hpml-alpha", "--hpml-confirm")


def pytest_configure(config: pytest.Config) -> None:
    comparison = config.stash[COMPARISON_KEY] = Comparison(config, run_of(config))
    if comparison.reset and not comparison.save:
        raise pytest.UsageError("--hpml-reset-baseline restarts the history of the rows a save "
                                "stores: add --hpml-save-baseline (or leave the option out)")
    if (comparison.compare and comparison.confirm) or (comparison.save
                                                       and comparison.processes > 1):
        confirm.start_forkserver_in_background()
    if comparison.compare or (comparison.save and is_controller(config)):
        # Workers compare too, against the file the controller checked.
        comparison.open()
    if is_controller(config):
        config.pluginmanager.register(RerunFailures(comparison), f"hpml-reruns-{id(config)}")


def pytest_hpml_judge(item: pytest.Item, report: pytest.TestReport,
                      records: list[Record]) -> None:
    comparison = item.config.stash[COMPARISON_KEY]
    failing = []
    comparison.new_rerun_failures = []
    if comparison.compare:
        failing = comparison.judge(item, records, may_confirm=report.passed)
    if comparison.save and report.passed and not failing:
        comparison.widen_history(item, records)
    if comparison.new_rerun_failures:
        # Carried to the controller on the report (an xdist worker's own list is never read).
        report.hpml_rerun_failures = comparison.new_rerun_failures
    if failing and report.passed:
        report.outcome = "failed"
        report.longrepr = "hpml: failed the comparison with the baseline:\n  " + "\n  ".join(
            failing)


class RerunFailures:
    """The controller's collector of the fresh processes that failed, from the call reports
    of its own tests and of xdist workers'."""

    def __init__(self, comparison: Comparison) -> None:
        self.comparison = comparison

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.comparison.rerun_failures += getattr(report, "hpml_rerun_failures", None) or []


def pytest_sessionfinish(session: pytest.Session) -> None:
    comparison = session.config.stash.get(COMPARISON_KEY, None)
    failures = comparison.rerun_failures if comparison else []
    if failures and is_controller(session.config):
        comparison.run.say_once(
            f"{len(failures)} fresh process(es) failed, so they confirmed nothing (verdicts and "
            f"saves rest on the processes that worked); the first: {failures[0]}")


def pytest_hpml_outputs(config: pytest.Config) -> list[Output]:
    comparison = config.stash[COMPARISON_KEY]
    if not comparison.save:
        return []
    return [Output("baseline", comparison.path, comparison.write)]
