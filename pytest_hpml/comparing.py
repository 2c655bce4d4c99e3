"""Baselines and verdicts in a run: --hpml-compare fails the tests whose metrics regressed,
--hpml-save-baseline stores the run's measurements (a pytest plugin module).

The baseline file is read before any test runs, for a comparison and for a save alike: a
damaged file stops the run at once, naming the file, instead of after hours of GPU work.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_hpml import policy
from pytest_hpml.compare import baselines, confirm, history, noise, suite, verdicts
from pytest_hpml.machine.fingerprint import fingerprint, machine_key, software_changes
from pytest_hpml.machine.revision import current_commit
from pytest_hpml.policy import marker_options, non_negative, path_option, positive, significance
from pytest_hpml.report.files import Output, writable_problem
from pytest_hpml.results import Record
from pytest_hpml.selection import profile_of
from pytest_hpml.session import OUTER_RUN_ONLY, HpmlRun, add_option, is_controller, run_of


class Comparison:
    """This run's baseline options and the baseline file, read once."""

    def __init__(self, config: pytest.Config, run: HpmlRun) -> None:
        opt = config.option
        self.run = run
        self.config = config
        self.compare: bool = opt.hpml_compare
        self.save: bool = opt.hpml_save_baseline
        self.keep: int = opt.hpml_baseline_runs
        self.reset: bool = opt.hpml_reset_baseline
        self.confirm: int = opt.hpml_confirm
        self.processes: int = opt.hpml_baseline_processes
        self.tolerance: float = opt.hpml_tolerance
        self.alpha: float = opt.hpml_alpha
        self.judging = {"drift": opt.hpml_drift, "max_detectable": opt.hpml_max_detectable or None}
        self.require: bool = opt.hpml_require_baseline
        self.prune: bool = opt.hpml_prune_baseline
        self.directory = Path(opt.hpml_baselines or Path(config.rootpath, "baselines"))
        self.baseline: baselines.Baseline | None = None
        self.rows_by_test: dict[str, list[str]] = {}  # of the baseline, by the test's node id
        # What the run collected and ran, for the stored rows it did not make (compare/suite).
        self.collected: set[str] = set()
        self.ran: set[str] = set()
        self.deselected = 0
        self.pruned: frozenset[str] = frozenset()
        # Fresh processes that failed (a rerun that fails its own checks confirms nothing),
        # "nodeid: what happened": those of the test being judged, carried on its report, and
        # all of the run's, gathered by the controller and said once at the end.
        self.new_rerun_failures: list[str] = []
        self.rerun_failures: list[str] = []

    # The machine's identity asks torch about GPUs: only runs that compare or save pay for it.
    @property
    def profile(self) -> str:
        return profile_of(self.config)

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
            seeded = {m.get("seeded_from") for r in found.records.values()
                      for m in r.get("metrics", [])} - {None}
            for source in sorted(seeded) if self.compare else ():
                self.run.say_once(f"--hpml-compare: {verdicts.seeded_basis(source)}")
        if found is None and self.compare and self.require:
            others = sorted(p.name for p in self.directory.glob("*.json")) \
                if self.directory.is_dir() else []
            raise pytest.UsageError(
                f"--hpml-require-baseline: no baseline of this machine ({self.machine}) and "
                f"profile {self.profile!r} at {self.path}"
                + (f"; the folder holds {', '.join(others)}" if others else
                   "; the folder holds no baseline file")
                + ". Save one on this machine with --hpml-save-baseline (on the base branch), or "
                  "point --hpml-baselines at the folder that has it.")
        self.baseline = found
        self.rows_by_test = suite.rows_by_test(found.records) if found else {}

    def _compare(self, record: Record, can_confirm: int) -> None:
        old = self.baseline.metrics_for(record.id) if self.baseline else {}
        record.metrics = [m for m in record.metrics if verdicts.outcome(m) != "missing"]
        record.metrics.extend(verdicts.compare_record(record, old, self.tolerance, self.alpha,
                                                      can_confirm, **self.judging))

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
        lines = [line for r in records for line in verdicts.failures(r, self.tolerance)]
        return lines + self.vanished_rows(item, records)

    def missing_row(self, rid: str, expected: bool = False) -> Record:
        """A stored row this run did not make, every metric of it `missing`."""
        data = self.baseline.records[rid] if self.baseline else {}
        row = Record(id=rid, experiment=data.get("experiment", rid), test=data.get("test", ""),
                     params=dict(data.get("params", {})), order=list(data.get("order", [])),
                     expected_missing=["*"] if expected else [])
        row.metrics = verdicts.compare_record(
            row, self.baseline.metrics_for(rid) if self.baseline else {}, self.tolerance,
            self.alpha)
        return row

    def vanished_rows(self, item: pytest.Item, records: list[Record]) -> list[str]:
        """Rows the baseline holds of this test that it did not make this time, appended to
        its records as missing; one line per row that fails (unless the test expects any
        metric to be missing: @pytest.mark.hpml(expect_missing="*"), catch_out_of_memory)."""
        made = {r.id for r in records}
        expected = marker_options(item).get("expect_missing") == "*" or any(
            r.may_miss("*") for r in records)
        lines = []
        for rid in self.rows_by_test.get(item.nodeid, []):
            if rid in made:
                continue
            records.append(self.missing_row(rid, expected))
            if not expected:
                lines.append(f"{rid}: a row of the baseline that this run of the test did not "
                             "make (an early return, a branch, a row no longer recorded); if "
                             "that is intended, --hpml-save-baseline --hpml-prune-baseline "
                             "drops it")
        return lines

    # -- what the run collected and ran (the controller's view, with or without xdist) --------
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.collected.update(item.nodeid for item in session.items)

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: object, ids: list[str]) -> None:
        self.collected.update(ids)

    def pytest_deselected(self, items: list[pytest.Item]) -> None:
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.ran.add(report.nodeid)
            self.rerun_failures += getattr(report, "hpml_rerun_failures", None) or []

    def finish(self, session: pytest.Session) -> None:
        """At the end of the run (controller): rows the baseline holds of tests that are gone
        from a sweep fail the run; rows of tests gone from the suite are said once, and a save
        drops them only with --hpml-prune-baseline."""
        if self.baseline is None:
            return
        produced = {r.id for r in self.run.records
                    if any(verdicts.outcome(m) != "missing" for m in r.metrics)}
        gone = suite.gone_rows(self.baseline.records, self.collected, self.ran, produced,
                               lambda f: Path(self.config.rootpath, f).exists(),
                               suite.selection_complete(self.config.option, self.deselected))
        if self.compare and gone.dropped_by_sweep:
            self.run.records += [self.missing_row(rid) for rid in gone.dropped_by_sweep]
            self.run.say_once(
                f"--hpml-compare: {len(gone.dropped_by_sweep)} row(s) of the baseline that no "
                "test makes any more, while their test function still runs (a value left its "
                "sweep): " + _some(gone.dropped_by_sweep) + "; if intended, "
                "--hpml-save-baseline --hpml-prune-baseline drops them")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if gone.not_in_suite:
            self.run.say_once(f"in the baseline, not in this suite: {len(gone.not_in_suite)} "
                              f"row(s) of tests that are gone: {_some(gone.not_in_suite)}"
                              + ("" if self.save and self.prune else
                                 "; --hpml-save-baseline --hpml-prune-baseline drops them"))
        if self.save and self.prune:
            self.pruned = frozenset(gone.all)

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
        policy = history.MergePolicy(
            keep=self.keep, reset=self.reset, prune=self.pruned,
            judge=lambda new, old: verdicts.compare_metric(new, old, self.tolerance, self.alpha,
                                                           drift=self.judging["drift"]),
            commit=current_commit(self.config.rootpath))  # dated by the store, under its lock
        saved = baselines.save(self.path, fingerprint(), self.profile, passed, policy)
        if saved.levels:
            self.run.say_once(
                f"--hpml-save-baseline: {len(saved.levels)} metric(s) changed beyond what this "
                "machine can detect; their history starts at the new level (the previous one "
                "is kept in the file as accepted): " + _some(saved.levels))
        if self.pruned:
            self.run.say_once(f"--hpml-save-baseline: dropped {len(self.pruned)} row(s) of "
                              "tests that are gone (--hpml-prune-baseline)")
        if saved.skipped:
            self.run.say_once(f"--hpml-save-baseline: {len(saved.skipped)} metric(s) are not "
                              "finite numbers and were not saved: " + "; ".join(saved.skipped[:5])
                              + (" ..." if len(saved.skipped) > 5 else ""))
        return [self.path]  # a symlink is shown with the file it links to


def _some(items: list[str], shown: int = 5) -> str:
    return "; ".join(items[:shown]) + (f" ... ({len(items)} in all)" if len(items) > shown
                                       else "")


COMPARISON_KEY = pytest.StashKey[Comparison]()
#: Fresh processes behind a failing verdict: with the suspect run, three process medians,
#: enough to estimate the spread between processes.
DEFAULT_CONFIRMATIONS = 2
#: Processes behind a saved baseline: three medians are the fewest that give a spread.
DEFAULT_BASELINE_PROCESSES = 3


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    # The comparison and the save are the outer run's (rerun=False): a rerun only measures.
    add_option(parser, "--hpml-compare", action="store_true", rerun=False,
               help="compare with this machine's baseline; fail tests whose metrics regressed")
    add_option(parser, "--hpml-save-baseline", action="store_true", rerun=False,
               help="merge this run's results into this machine's baseline file")
    add_option(parser, "--hpml-baselines", pin=True, path=True, rerun=False, type=path_option,
               metavar="DIR",
               help="folder of baseline files (default: <rootdir>/baselines)")
    add_option(parser, "--hpml-baseline-runs", pin=True, rerun=False, type=positive(int),
               default=history.DEFAULT_KEEP, metavar="N",
               help="runs of history a baseline keeps per metric, so the run-to-run spread is "
                    f"known ({history.DEFAULT_KEEP})")
    add_option(parser, "--hpml-baseline-processes", pin=True, rerun=False, type=positive(int),
               default=DEFAULT_BASELINE_PROCESSES, metavar="N",
               help="processes a save measures each test in (the run's own and N-1 fresh "
                    "ones), so the first baseline already knows the spread between "
                    f"processes ({DEFAULT_BASELINE_PROCESSES}; 1: the run alone)")
    add_option(parser, "--hpml-prune-baseline", action="store_true", rerun=False,
               help="with --hpml-save-baseline: drop the rows of tests that are gone from the "
                    "suite (or no longer make them); without it they are kept, and said")
    add_option(parser, "--hpml-reset-baseline", action="store_true", rerun=False,
               help="with --hpml-save-baseline: restart the history of the saved rows "
                    "instead of appending to it (after a hardware or driver change)")
    add_option(parser, "--hpml-tolerance", pin=True, rerun=False, type=policy.fraction,
               default=verdicts.DEFAULT_TOLERANCE, metavar="FRACTION",
               help="default relative change before a metric counts as changed "
                    f"({verdicts.DEFAULT_TOLERANCE})")
    add_option(parser, "--hpml-alpha", pin=True, rerun=False, type=significance,
               default=verdicts.DEFAULT_ALPHA, metavar="P",
               help="significance level of a verdict: a change must be this unlikely under "
                    f"the noise this machine has shown ({verdicts.DEFAULT_ALPHA})")
    add_option(parser, "--hpml-drift", pin=True, rerun=False, type=policy.fraction,
               default=noise.DEFAULT_DRIFT, metavar="FRACTION",
               help="drift of a time or a rate between occasions (the machine's speed an hour "
                    f"later) assumed until a baseline holds {noise.DRIFT_MIN_SAVES} saves, "
                    f"from which it is learned ({noise.DEFAULT_DRIFT}; 0: none)")
    add_option(parser, "--hpml-max-detectable", pin=True, rerun=False, type=policy.fraction,
               default=verdicts.DEFAULT_MAX_DETECTABLE, metavar="FRACTION",
               help="a metric whose detectable change exceeds this is a blind spot, said in "
                    "the summary and the report with what would narrow it "
                    f"({verdicts.DEFAULT_MAX_DETECTABLE}; 0: never said)")
    add_option(parser, "--hpml-confirm", pin=True, rerun=False, type=non_negative(int),
               default=DEFAULT_CONFIRMATIONS, metavar="N",
               help="fresh processes that measure a suspected regression again before it "
                    f"fails the test ({DEFAULT_CONFIRMATIONS}; 0: decide from the run alone)")
    add_option(parser, "--hpml-require-baseline", pin=True, rerun=False, action="store_true",
               help="with --hpml-compare: stop before the tests when this machine and profile "
                    "have no baseline (CI: a missing baseline must not pass as all 'new')")


def pytest_configure(config: pytest.Config) -> None:
    comparison = config.stash[COMPARISON_KEY] = Comparison(config, run_of(config))
    for given, what in ((comparison.reset, "--hpml-reset-baseline restarts the history of the "
                                           "rows a save stores"),
                        (comparison.prune, "--hpml-prune-baseline drops, in a save, the rows of "
                                           "tests that are gone")):
        if given and not comparison.save:
            raise pytest.UsageError(f"{what}: add --hpml-save-baseline (or leave the option "
                                    "out)")
    if (comparison.compare and comparison.confirm) or (comparison.save
                                                       and comparison.processes > 1):
        confirm.start_forkserver_in_background()
    if comparison.compare or (comparison.save and is_controller(config)):
        # Workers compare too, against the file the controller checked.
        comparison.open()
    if is_controller(config) and (comparison.compare or comparison.save):
        config.pluginmanager.register(comparison, f"hpml-comparison-{id(config)}")


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


def pytest_hpml_outputs(config: pytest.Config) -> list[Output]:
    comparison = config.stash[COMPARISON_KEY]
    if not comparison.save:
        return []
    return [Output("baseline", comparison.path, comparison.write)]


def pytest_hpml_finish(session: pytest.Session) -> None:
    comparison = session.config.stash[COMPARISON_KEY]
    if comparison.compare or comparison.save:
        comparison.finish(session)
    failures = comparison.rerun_failures
    if failures:
        comparison.run.say_once(
            f"{len(failures)} fresh process(es) failed, so they confirmed nothing (verdicts and "
            f"saves rest on the processes that worked); the first: {failures[0]}")
