"""The stored baseline in a run: --hpml-compare fails the tests whose metrics regressed against
this machine's baseline file (a pytest plugin module; saving.py stores a run into it).

The baseline file is read before any test runs, for a comparison and for a save alike: a
damaged file stops the run at once, naming the file, instead of after hours of GPU work.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from pytest_hpml import environment, rerun
from pytest_hpml.compare import baselines, drift_prior, engine, settling, suite
from pytest_hpml.compare.advice import Advice, StoredAdvice
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import seeded_basis
from pytest_hpml.judging import rules_of
from pytest_hpml.machine.fingerprint import fingerprint, machine_key, software_changes
from pytest_hpml.policy import marker_options, non_negative, path_option
from pytest_hpml.report.files import writable_problem
from pytest_hpml.results import Record
from pytest_hpml.selection import profile_of
from pytest_hpml.session import HpmlRun, add_option, judges, run_of, writes_outputs


class StoredBaseline(engine.Source):
    """The evidence of --hpml-compare: this machine's baseline file."""

    label = "the baseline"

    def __init__(self, baseline: baselines.Baseline | None, advice: Advice) -> None:
        self.baseline = baseline
        self.advice = advice
        # The rules with the drift a file's metrics learned, for the file and the rules last
        # asked of (asked at every test's judgement, and by a save's level confirmation
        # against the same file: worked out once).
        self._rules: tuple[baselines.Baseline, engine.Rules, engine.Rules] | None = None

    def stored(self, record_id: str) -> dict[str, Stored]:
        return self.baseline.metrics_for(record_id) if self.baseline else {}

    def rules(self, rules: engine.Rules) -> engine.Rules:
        """The run's rules, assuming the drift the file's metrics learned where it is more
        than --hpml-drift (compare/drift_prior.py)."""
        return self.rules_against(rules, self.baseline)

    def rules_against(self, rules: engine.Rules, baseline: baselines.Baseline | None
                      ) -> engine.Rules:
        """`rules` assuming the drift `baseline`'s metrics learned (drift_prior.of_baseline),
        kept for the file and the rules last asked of."""
        if baseline is None:
            return rules
        if self._rules is None or self._rules[0] is not baseline or self._rules[1] != rules:
            self._rules = (baseline, rules, drift_prior.of_baseline(rules, baseline))
        return self._rules[2]


#: Rows of a test whose judgement (about 50 us a row) hides a good part of the forkserver's
#: start (about 0.25 s) when it runs beside it; a test of fewer rows would wait for most of a
#: start its confirmation may never need.
FORKSERVER_BESIDE_ROWS = 2000


class BaselineRun:
    """This run's baseline options and the baseline file, read once."""

    def __init__(self, config: pytest.Config, run: HpmlRun) -> None:
        opt = config.option
        self.run = run
        self.config = config
        self.compare: bool = opt.hpml_compare
        self.save: bool = opt.hpml_save_baseline
        self.confirm: int = opt.hpml_confirm
        self.processes: int = opt.hpml_baseline_processes
        self.require: bool = opt.hpml_require_baseline
        self.prune: bool = opt.hpml_prune_baseline
        self.directory = Path(opt.hpml_baselines or Path(config.rootpath, "baselines"))
        self.baseline: baselines.Baseline | None = None
        self.source = StoredBaseline(None, StoredAdvice(self.confirm, self.processes))
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

    @property
    def rules(self) -> engine.Rules:
        return rules_of(self.config)

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
            if self.path.is_dir():
                # The folder is right; the baseline file's own name is taken by a folder.
                raise pytest.UsageError(
                    f"--hpml-save-baseline: the baseline file {self.path} is a folder; move "
                    "it away (a save writes this machine's baseline under that name)")
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
        elif found.profile != self.profile:
            # A copied or renamed file: its figures belong to other sizes than its name says.
            raise pytest.UsageError(
                f"baseline file {found.path} holds the {found.profile!r} profile, not "
                f"{self.profile!r} as its name says; it was left untouched. Rename it to "
                f"{machine_key(found.fingerprint)}-{found.profile}.json or remove it")
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
                self.run.say_once(f"--hpml-compare: {seeded_basis(source)}")
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
        self.source.baseline = found
        if found is not None:
            environment.freeze_configured_heap(self.config)  # read once, kept all the run
        self.rows_by_test = suite.rows_by_test(found.records) if found else {}

    def baseline_now(self) -> baselines.Baseline | None:
        """The file as it is now: the one read at the start where no save has written it since
        (a 10k-row file takes a second to read and check again), else read again (another
        shard's or runner's save landed meanwhile)."""
        return baselines.current(self.path, self.baseline)

    def measure_again(self, item: pytest.Item, records: list[Record], processes: int,
                      why: str, rows: list[Record] | None = None) -> None:
        """Run the test in `processes` fresh processes and fold what they measured into its
        records (engine.add_processes); `rows`: the ones it runs for (a test that asks
        hpml.wants makes only those)."""
        fresh = rerun.run_fresh(item.config, [item.nodeid], processes, what=why, rows=rows,
                                made=records)
        self.new_rerun_failures += [f"{item.nodeid}: {p}" for p in fresh.problems]
        engine.add_processes(records, fresh.records)
        for record in records:
            record.warnings += [f"{why}: {p}" for p in fresh.problems]

    def judge(self, item: pytest.Item, records: list[Record], may_confirm: bool = True
              ) -> list[str]:
        """Fill verdicts in place, confirming suspected regressions in fresh processes first
        (not for a test that failed anyway); returns one line per metric that fails.

        Fresh processes run one at a time, up to --hpml-confirm: all of them while they show
        the change, and no more once one brings it back within the tolerance (a suspicion the
        next process dispels costs one)."""
        rules = self.source.rules(self.rules)
        memo = engine.FamilyMemo()

        def judge_all(left: int, rows: list[Record]) -> None:
            engine.judge_rows(records, self.source.stored, rules, left, self.source.advice,
                              rows=rows, memo=memo)

        # A fresh process measures every row of the test (each row gets its values, not only
        # the suspected ones: a sweep's rows pool their spread, and rows picked for an extreme
        # first value would show it alone), but those of a test that asks hpml.wants; the
        # suspected ones are judged again.
        rounds = self.confirm if may_confirm else 0
        beside = rounds and len(records) >= FORKSERVER_BESIDE_ROWS
        with rerun.forkserver_beside(item.config) if beside else contextlib.nullcontext():
            settling.settle(records, judge_all, settling.suspected,
                            lambda pending: self.measure_again(item, records, 1, "confirmation",
                                                               pending), rounds)
        lines = [line for r in records for line in engine.failures(r, rules)]
        return lines + self.vanished_rows(item, records)

    def missing_row(self, rid: str, expected: bool = False) -> Record:
        """A stored row this run did not make, every metric of it `missing`."""
        data = self.baseline.records[rid] if self.baseline else {}
        shell = Record(id=rid, experiment=data.get("experiment", rid), test=data.get("test", ""),
                       params=dict(data.get("params", {})), order=list(data.get("order", [])))
        return engine.missing_row(shell, self.source.stored(rid), expected)

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
        produced = {r.id for r in self.run.records if r.metrics}
        narrowed = suite.narrowing(self.config.option, self.config.args, self.deselected)
        gone = suite.gone_rows(self.baseline.records, self.collected, self.ran, produced,
                               lambda f: Path(self.config.rootpath, f).exists(), not narrowed)
        if self.compare and gone.dropped_by_sweep:
            self.run.records += [self.missing_row(rid) for rid in gone.dropped_by_sweep]
            self.run.say_once(
                f"--hpml-compare: {len(gone.dropped_by_sweep)} row(s) of the baseline that no "
                "test makes any more, while their test function still runs (a value left its "
                "sweep): " + some(gone.dropped_by_sweep) + "; if intended, "
                "--hpml-save-baseline --hpml-prune-baseline drops them")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        narrowed = narrowed or suite.path_narrowing(self.config.args, self.whole_suite(),
                                                    self.config.invocation_params.dir)
        prunes = self.save and self.prune and not narrowed
        if gone.not_in_suite:
            self.run.say_once(f"in the baseline, not in this suite: {len(gone.not_in_suite)} "
                              f"row(s) of tests that are gone: {some(gone.not_in_suite)}"
                              + ("" if prunes or narrowed else
                                 "; --hpml-save-baseline --hpml-prune-baseline drops them"))
        if self.save and self.prune and narrowed:
            # The rows of tests this run left out are not gone: a shard would delete the other
            # shards' rows.
            self.run.say_once("--hpml-prune-baseline: nothing was pruned: this run selected "
                              f"part of the suite ({'; '.join(narrowed)}); prune on a run of "
                              "the whole suite")
        if prunes:
            self.pruned = frozenset(gone.all)

    def whole_suite(self) -> list[Path]:
        """The folders a run without paths collects: testpaths (globbed, as pytest does) or
        the folder pytest was started in."""
        root = self.config.rootpath
        found = [p for pattern in self.config.getini("testpaths") or []
                 for p in sorted(root.glob(pattern))]
        return found or [Path(self.config.invocation_params.dir)]


def some(items: list[str], shown: int = 5) -> str:
    return "; ".join(items[:shown]) + (f" ... ({len(items)} in all)" if len(items) > shown
                                       else "")


BASELINE_KEY = pytest.StashKey[BaselineRun]()
#: Fresh processes behind a failing verdict: with the suspect run, three process medians,
#: enough to estimate the spread between processes.
DEFAULT_CONFIRMATIONS = 2


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    # The comparison and the save are the outer run's (rerun=False): a rerun only measures.
    add_option(parser, "--hpml-compare", action="store_true", rerun=False,
               help="compare with this machine's baseline; fail tests whose metrics regressed")
    add_option(parser, "--hpml-baselines", pin=True, path=True, rerun=False, type=path_option,
               metavar="DIR",
               help="folder of baseline files (default: <rootdir>/baselines)")
    add_option(parser, "--hpml-confirm", pin=True, rerun=False, type=non_negative(int),
               default=DEFAULT_CONFIRMATIONS, metavar="N",
               help="fresh processes that measure a suspected regression again before it "
                    f"fails the test ({DEFAULT_CONFIRMATIONS}; 0: decide from the run alone)")
    add_option(parser, "--hpml-require-baseline", pin=True, rerun=False, action="store_true",
               help="with --hpml-compare: stop before the tests when this machine and profile "
                    "have no baseline (CI: a missing baseline must not pass as all 'new')")


def pytest_configure(config: pytest.Config) -> None:
    comparison = config.stash[BASELINE_KEY] = BaselineRun(config, run_of(config))
    if comparison.compare and comparison.confirm:
        rerun.start_forkserver_in_background(config)
    if judges(config) and (comparison.compare or (comparison.save and writes_outputs(config))):
        # Workers compare too, against the file the controller checked.
        comparison.open()
    if writes_outputs(config) and (comparison.compare or comparison.save):
        config.pluginmanager.register(comparison, f"hpml-comparison-{id(config)}")


def pytest_hpml_judge(item: pytest.Item, report: pytest.TestReport,
                      records: list[Record]) -> None:
    comparison = item.config.stash[BASELINE_KEY]
    if not judges(item.config):
        return  # rank 0 judges the records of every rank of a torchrun or srun job
    comparison.new_rerun_failures = []
    failing = comparison.judge(item, records, report.passed) if comparison.compare else []
    if comparison.new_rerun_failures:
        # Carried to the controller on the report (an xdist worker's own list is never read).
        report.hpml_rerun_failures = comparison.new_rerun_failures
    if failing and report.passed:
        report.outcome = "failed"
        report.longrepr = "hpml: failed the comparison with the baseline:\n  " + "\n  ".join(
            failing)


def pytest_hpml_finish(session: pytest.Session) -> None:
    comparison = session.config.stash[BASELINE_KEY]
    if comparison.compare or comparison.save:
        comparison.finish(session)
    failures = comparison.rerun_failures
    if failures:
        comparison.run.say_once(
            f"{len(failures)} fresh process(es) failed, so they confirmed nothing (verdicts and "
            f"saves rest on the processes that worked); the first: {failures[0]}")
