"""--hpml-compare-ref=REF: compare the selected tests with the code at a git ref measured now,
in fresh processes on this machine, interleaved, with the verdicts of --hpml-compare and no
stored baseline (a pytest plugin module; the mechanics are compare/reference.py's).

Each test runs as usual (the working tree, in this process), then once at REF in a fresh
process: that first pair judges it. A test whose first pair shows a change the worse way (or
every test, with --hpml-compare-ref-all) is measured again in further pairs of fresh
processes, one at REF and one here, alternating which goes first, up to
--hpml-compare-ref-processes on each side, and judged on all of them; a regression fails it. One
within 1.5 times its detectable change, or whose processes fall into two tight levels, a
side at each (as a process's speed mode puts them), is measured in as many pairs again first
(2N-1 processes a side; compare/ref_rounds.py), and fails it if it stands.
An improvement seen in the first pair alone is `ambiguous` (--hpml-compare-ref-all confirms
improvements too).
Both sides share one occasion, so no drift between them is assumed, and processes' modes as
little as 10 % apart are told apart (compare/modes.py). A test that is not at REF (its file or
its function is new) gets `new`. --hpml-compare-ref-budget bounds the seconds spent in
processes at REF and again here: past it, the remaining tests are not compared, and the run
says which.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from pytest_hpml import rerun
from pytest_hpml.compare import engine, ref_rounds, reference, settling
from pytest_hpml.compare.advice import Advice, RefAdvice
from pytest_hpml.compare.stored import Stored
from pytest_hpml.judging import rules_of
from pytest_hpml.policy import git_ref_option, non_negative, positive
from pytest_hpml.results import Record, Verdict
from pytest_hpml.session import add_option, is_controller, run_of

#: Processes on each side behind the verdict of a suspected test.
DEFAULT_PROCESSES = 3
#: Tests of a file measured at REF in one process, at most.
BATCH = 64


class AtRef(engine.Source):
    """The evidence of --hpml-compare-ref: the test's processes at REF, measured now."""

    one_occasion = True  # both sides are measured on this run's occasion, in turns

    def __init__(self, label: str, advice: Advice) -> None:
        self.label = label
        self.advice = advice
        self.processes: list[list[Record]] = []
        self._indexed = -1  # len(processes) when _by_row was built
        self._by_row: dict[str, dict[str, list]] = {}

    def stored(self, record_id: str) -> dict[str, Stored]:
        # Indexed by row once per set of processes: a sweep of 10 000 rows scanned every
        # process's records for each row.
        if self._indexed != len(self.processes):
            self._by_row = {}
            for records in self.processes:
                for record in records:
                    row = self._by_row.setdefault(record.id, {})
                    for m in record.metrics:
                        row.setdefault(m.name, []).append(m)
            self._indexed = len(self.processes)
        found = self._by_row.get(record_id, {})
        return {name: Stored.measured_now(ms) for name, ms in found.items()
                if ms[0].compared}


class RefRun:
    """This run's comparison with REF: the worktree, and what it has spent."""

    def __init__(self, config: pytest.Config, ref: reference.Ref, tree: Path) -> None:
        opt = config.option
        self.config = config
        self.ref = ref
        self.mapping = reference.Mapping(ref.top, tree)
        self.all: bool = opt.hpml_compare_ref_all
        self.processes: int = opt.hpml_compare_ref_processes
        self.budget = settling.Budget(opt.hpml_compare_ref_budget)
        self.worktree: reference.Worktree | None = None  # the controller's, removed at the end
        self.broken: list[str] = []  # tests REF could not be measured for, and why
        # The first process at REF of each test, measured a file's tests at a time: what it
        # made, or why it could not (the test is not there, REF could not run at all).
        self.first: dict[str, rerun.Fresh] = {}

    @property
    def label(self) -> str:
        return f"{self.ref.name} ({self.ref.short})"

    def place(self) -> rerun.Place:
        root = self.config.rootpath
        return rerun.Place(
            move=self.mapping.argument,
            environ=lambda env: reference.ref_environment(env, self.mapping, root),
            sys_path=lambda entries: self.mapping.import_path(entries, root))

    def at_ref(self, item: pytest.Item, nodeids: list[str] | None = None,
               rows: list[Record] | None = None, made: list[Record] | None = None
               ) -> rerun.Fresh:
        """One fresh process at REF of the test (or of `nodeids`, the test among them); `rows`:
        the ones it runs for (a test that asks hpml.wants makes only those), each after the
        rows of `made` (the test's, as this run made them) just before it (rerun.warm_up)."""
        if self.mapping.moved(item.path) == str(item.path):
            return rerun.Fresh(absent={item.nodeid})  # its file is not at REF
        return self.budget.spend(lambda: rerun.run_fresh(
            self.config, nodeids or [item.nodeid], 1, self.place(),
            what=f"its process at {self.label}", rows=rows, made=made or ()))

    def first_at_ref(self, item: pytest.Item) -> rerun.Fresh:
        """The test's first process at REF. The first test of a file to be judged has the
        file's remaining tests measured at REF with it, in one process: a process per file, not
        per test (seconds of start-up each, in a real project), and each test's measurement at
        REF still within that file's run here. Under xdist a worker cannot know which tests it
        runs next: there a process per test."""
        if item.nodeid not in self.first:
            batch = [item.nodeid]
            if not hasattr(self.config, "workerinput"):
                file = item.nodeid.split("::", 1)[0]
                batch += [i.nodeid for i in item.session.items if i.nodeid != item.nodeid
                          and i.nodeid.split("::", 1)[0] == file
                          and i.nodeid not in self.first][:BATCH - 1]
            found = self.at_ref(item, batch)
            general = [p for p in found.problems
                       if not any(p.startswith(f"{n}:") for n in batch)]
            for nodeid in batch:
                # Each test gets its own records and problems; what concerns the process as a
                # whole goes with the test that asked for it.
                own = [p for p in found.problems if p.startswith(f"{nodeid}:")]
                self.first[nodeid] = rerun.Fresh(
                    records=[[r for records in found.records for r in records
                              if r.test == nodeid]] if found.records else [],
                    problems=own + (general if nodeid == item.nodeid else []),
                    absent=found.absent & {nodeid}, broken=found.broken,
                    stopped=found.stopped)
        return self.first.pop(item.nodeid)

    def here(self, item: pytest.Item, rows: list[Record] | None = None,
             made: list[Record] | None = None) -> rerun.Fresh:
        """One fresh process of the test here, as a confirmation runs it (`rows`, `made`: as
        at_ref)."""
        return self.budget.spend(lambda: rerun.run_fresh(self.config, [item.nodeid], 1,
                                                         rows=rows, made=made or ()))

    def judge(self, item: pytest.Item, records: list[Record]) -> list[str]:
        """Fill the verdicts of the test's records against REF; returns the failing lines."""
        if not self.budget.left:
            for record in records:
                record.warnings.append(f"not compared with {self.label}: the "
                                       f"--hpml-compare-ref-budget of {self.budget.seconds:g} s "
                                       "is spent")
            return []
        first = self.first_at_ref(item)
        if first.broken:
            # REF could not run at all (its conftest failed to import, a plugin it lacks):
            # nothing was compared, and saying `new` would pass a run that checked nothing.
            why = f"{self.label} could not be measured: {first.broken}"
            self.broken.append(f"{item.nodeid}: {why}")
            return [f"{item.nodeid}: {why}"]
        if item.nodeid in first.absent:
            for record in records:
                _all_new(record, f"the test is not in {self.label}")
            return []
        source = AtRef(f"against {self.label} measured now, interleaved",
                       RefAdvice(self.processes, self.all))
        source.processes = list(first.records)
        for record in records:
            record.warnings += first.problems
        rules = source.rules(rules_of(self.config))
        rounds = {"done": 0}
        memo = engine.FamilyMemo()

        def judge_all(left: int, rows: list[Record]) -> None:
            engine.judge_rows(records, source.stored, rules, 0, source.advice, source.label,
                              rows=rows, memo=memo)

        def measure_pair(pending: list[Record]) -> None:
            # Alternate which side goes first, so neither always follows the other.
            sides = ("here", "ref") if rounds["done"] % 2 == 0 else ("ref", "here")
            rounds["done"] += 1
            for side in sides:
                fresh = self.here(item, pending, records) if side == "here" else \
                    self.at_ref(item, rows=pending, made=records)
                if side == "here":
                    engine.add_processes(records, fresh.records)
                else:
                    source.processes += fresh.records
                records[0].warnings += fresh.problems

        # A change the worse way is measured again; an apparent improvement fails nothing, and
        # one pair's "improvement" is said as unconfirmed instead (on unchanged code here 7 of
        # the 15 rows the first pair suspected were faster, up to -46 %).
        done = settling.settle(records, judge_all,
                             (lambda r: True) if self.all
                             else ref_rounds.unsettled_the_worse_way,
                             measure_pair, self.processes - 1, self.budget)
        # ref_rounds.regressed first: the evidence of a row is built only for a regression (a
        # sweep's 10 000 rows would each build theirs).
        escalated = {id(r) for r in records if ref_rounds.regressed(r) and (
            ref_rounds.marginal(r)
            or ref_rounds.parted_like_modes(r, source.stored(r.id), rules))
        } if done == self.processes - 1 else set()

        def escalating(record: Record) -> bool:
            return id(record) in escalated and ref_rounds.unsettled_the_worse_way(record)

        if escalated:
            # A regression no further past what this machine can detect than ref_rounds.MARGIN times
            # is measured in as many pairs again before it fails: the spread of three processes a
            # side is a guess of four degrees of freedom, and unchanged code of a 23-test suite
            # failed in 3 of 20 runs, each at 1.03-1.15 times its detectable change (+11.5 % against
            # 10 %, +17.2 % against 16.5 %). So is one whose sides stand at two tight levels: a
            # process lands in a mode of its own (its physical pages, where it runs), and all of one
            # side's in a slow one while the other's are fast came about once in 150 per test here
            # (torch.add, one process in four 23 % slower); more processes put some of either side
            # in the other's mode, which the verdict then judges as modes. A clear regression of
            # noisy processes stands as judged (measuring every regression again lost catches on a
            # noisy machine). Every pair is measured while the row still points the worse way:
            # stopping at the first round that no longer shows the regression would repeat a test
            # until it passes.
            done += settling.settle(records, judge_all, escalating, measure_pair,
                                    self.processes - 1, self.budget)
        for record in records:
            _improvements_of_one_pair(record, self.all)
        if not self.budget.left and (
                done < self.processes - 1 and any(
                    settling.unsettled(r, worse_only=not self.all) for r in records)
                or done < 2 * (self.processes - 1) and any(map(escalating, records))):
            behind = f" ({2 * self.processes - 1} behind a regression measured again)" \
                if escalated else ""
            records[0].warnings.append(f"{done + 1} of {self.processes} processes on each "
                                       f"side{behind}: the --hpml-compare-ref-budget is spent")
        lines = [line for r in records for line in engine.failures(r, rules)]
        made = {r.id for r in records}
        for shell in reference.rows_only_at_ref(source.processes, made):
            row = engine.missing_row(shell, source.stored(shell.id))
            records.append(row)
            lines += engine.failures(row, rules)
        return lines


def _improvements_of_one_pair(record: Record, measured_all: bool) -> None:
    """An improvement seen in one process a side is `ambiguous`: between two processes this
    machine moved unchanged code by tens of percent either way, and only the worse way is
    measured again unless --hpml-compare-ref-all."""
    for name, v in record.verdicts.items():
        if v.outcome == "improved" and (v.processes or 1) < 2:
            how = ("--hpml-compare-ref-processes=2 or more" if measured_all
                   else "--hpml-compare-ref-all")
            record.verdicts[name] = replace(
                v, outcome="ambiguous",
                basis=f"an improvement in one process a side, not measured again ({how} "
                      f"confirms one); {v.basis}")


def _all_new(record: Record, why: str) -> None:
    for m in record.metrics:
        if m.compared:
            record.verdicts[m.name] = Verdict("new", unit=m.unit, basis=why,
                                              current=record.values_of(m.name).value)
    record.warnings.append(why)


REF_KEY = pytest.StashKey[RefRun]()


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--hpml-compare-ref", rerun=False, metavar="REF", default=None,
               type=git_ref_option,
               help="compare with the code at git REF (a branch, a tag, a commit) measured now: "
                    "the tests run at REF (a git worktree in a temporary folder) and here in "
                    "fresh processes, interleaved; no stored baseline")
    add_option(parser, "--hpml-compare-ref-all", action="store_true", rerun=False,
               help="with --hpml-compare-ref: measure every test again on both sides, not "
                    "only those the first pair of processes shows slower (an improvement is "
                    "then confirmed too)")
    add_option(parser, "--hpml-compare-ref-processes", pin=True, rerun=False,
               type=positive(int), default=DEFAULT_PROCESSES, metavar="N",
               help="with --hpml-compare-ref: processes on each side behind the verdict of a "
                    f"suspected test ({DEFAULT_PROCESSES}); a regression within 1.5 times its "
                    "detectable change, or whose processes part like speed modes, is measured "
                    "in N-1 more on each side before it fails")
    add_option(parser, "--hpml-compare-ref-budget", pin=True, rerun=False,
               type=non_negative(float), default=0.0, metavar="SECONDS",
               help="with --hpml-compare-ref: seconds the run may spend in processes at REF "
                    "and again here; the tests after are not compared (0: no limit)")


def pytest_configure(config: pytest.Config) -> None:
    name = config.option.hpml_compare_ref
    if not name:
        return
    if config.option.hpml_compare:
        raise pytest.UsageError("--hpml-compare and --hpml-compare-ref=REF compare with two "
                                "different things: give one of them")
    run = run_of(config)
    worker = getattr(config, "workerinput", None)
    try:
        if worker is not None and "hpml_ref_tree" in worker:
            ref = reference.Ref(name, worker["hpml_ref_commit"], Path(worker["hpml_ref_top"]))
            tree, own = Path(worker["hpml_ref_tree"]), None
        else:
            ref = reference.resolve(name, config.rootpath)
            own = reference.Worktree(ref)
            tree = own.path
    except reference.RefError as exc:
        raise pytest.UsageError(str(exc)) from None
    comparison = config.stash[REF_KEY] = RefRun(config, ref, tree)
    comparison.worktree = own
    rerun.start_forkserver_in_background(config)
    if is_controller(config):
        run.say_once(f"--hpml-compare-ref={name}: measured against {comparison.label}, checked "
                     f"out in {tree} for this run, in fresh processes beside this one")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: object) -> None:
    """xdist: the workers use the controller's worktree."""
    config = getattr(node, "config", None)
    if config is None or REF_KEY not in config.stash:
        return
    comparison = config.stash[REF_KEY]
    node.workerinput.update(hpml_ref_tree=str(comparison.mapping.tree),  # type: ignore
                            hpml_ref_commit=comparison.ref.commit,
                            hpml_ref_top=str(comparison.ref.top))


def pytest_hpml_judge(item: pytest.Item, report: pytest.TestReport,
                      records: list[Record]) -> None:
    comparison = item.config.stash.get(REF_KEY, None)
    if comparison is None or not report.passed:
        return  # a test that failed is not compared
    failing = comparison.judge(item, records)
    if failing:
        report.outcome = "failed"
        report.longrepr = (f"hpml: failed the comparison with {comparison.label}:\n  "
                           + "\n  ".join(failing))


def pytest_unconfigure(config: pytest.Config) -> None:
    comparison = config.stash.get(REF_KEY, None)
    if comparison is not None and comparison.worktree is not None:
        comparison.worktree.remove()


def pytest_hpml_finish(session: pytest.Session) -> None:
    """The controller's summary: the rows the budget left uncompared."""
    comparison = session.config.stash.get(REF_KEY, None)
    if comparison is None:
        return
    run = run_of(session.config)
    left = [r.id for r in run.records
            if any("--hpml-compare-ref-budget" in w and "not compared" in w for w in r.warnings)]
    if left:
        run.say_once(f"--hpml-compare-ref={comparison.ref.name}: {len(left)} row(s) not "
                     f"compared, the --hpml-compare-ref-budget of {comparison.budget.seconds:g} s "
                     f"spent before their tests: {'; '.join(left[:5])}"
                     + (" ..." if len(left) > 5 else ""))
