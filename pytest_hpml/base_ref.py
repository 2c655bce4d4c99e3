"""--hpml-compare-ref=REF: compare the selected tests with the code at a git ref measured now,
in fresh processes on this machine, interleaved, with the verdicts of --hpml-compare and no
stored baseline (a pytest plugin module; the mechanics are compare/reference.py's).

Each test runs as usual (the working tree, in this process), then once at REF in a fresh
process: that first pair judges it. A test whose first verdict is anything but `unchanged`
(or every test, with --hpml-compare-ref-all) is measured again in further pairs of fresh
processes, one at REF and one here, alternating which goes first, up to
--hpml-compare-ref-processes on each side, and judged on all of them; a regression fails it.
Both sides share one occasion, so no drift between them is assumed. A test that is not at REF
(its file or its function is new) gets `new`. --hpml-compare-ref-budget bounds the seconds
spent in processes at REF and again here: past it, the remaining tests are not compared, and
the run says which.
"""

from __future__ import annotations

import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import pytest

from pytest_hpml.compare import confirm, reference, verdicts
from pytest_hpml.policy import non_negative, positive
from pytest_hpml.results import Record, Verdict
from pytest_hpml.selection import profile_of
from pytest_hpml.session import OUTER_RUN_ONLY, add_option, is_controller, run_of

#: Processes on each side behind the verdict of a suspected test.
DEFAULT_PROCESSES = 3


class RefComparison:
    """This run's comparison with REF: the worktree, and what it has spent."""

    def __init__(self, config: pytest.Config, ref: reference.Ref, tree: Path) -> None:
        opt = config.option
        self.config = config
        self.ref = ref
        self.mapping = reference.Mapping(ref.top, tree)
        self.all: bool = opt.hpml_compare_ref_all
        self.processes: int = opt.hpml_compare_ref_processes
        self.budget: float = opt.hpml_compare_ref_budget
        self.spent = 0.0
        self.worktree: reference.Worktree | None = None  # the controller's, removed at the end

    @property
    def label(self) -> str:
        return f"{self.ref.name} ({self.ref.short})"

    def _left(self) -> bool:
        return not self.budget or self.spent < self.budget

    def at_ref(self, item: pytest.Item) -> tuple[list[list[Record]], str | None, bool]:
        """One fresh process of the test at REF: (its records, what went wrong, whether the
        test is not there at all)."""
        if self.mapping.moved(item.path) == str(item.path):
            return [], f"{item.path.name} is not in {self.label}", True
        started = time.monotonic()
        config = item.config
        with tempfile.TemporaryDirectory(prefix="hpml-ref-run-") as folder:
            report = Path(folder, "ref.json")
            args = [self.mapping.argument(a) for a in confirm.pytest_args(
                item, profile_of(config), report, OUTER_RUN_ONLY)]
            code, output = confirm.run_forked(
                args, Path(self.mapping.moved(config.invocation_params.dir)),
                Path(folder, "ref.log"),
                reference.ref_environment(confirm.rerun_environment(), self.mapping,
                                          config.rootpath),
                self.mapping.import_path(list(sys.path), config.rootpath))
            self.spent += time.monotonic() - started
            if code in reference.NOT_THERE and not report.exists():
                return [], f"the test is not in {self.label}", True
            if code != 0 or not report.exists():
                tail = " | ".join(output.strip().splitlines()[-3:])
                return [], f"its process at {self.label} exited {code}: {tail}", False
            document = json.loads(report.read_text(encoding="utf-8"))
            return [[Record.from_dict(r) for r in document["records"]]], None, False

    def here(self, item: pytest.Item) -> tuple[list[list[Record]], list[str]]:
        """One fresh process of the test here, as a confirmation runs it."""
        started = time.monotonic()
        found, problems = confirm.rerun(item, profile_of(item.config), 1, OUTER_RUN_ONLY)
        self.spent += time.monotonic() - started
        return found, problems

    def judge(self, item: pytest.Item, records: list[Record]) -> list[str]:
        """Fill the verdicts of the test's records against REF; returns the failing lines."""
        if not self._left():
            for record in records:
                record.warnings.append(f"not compared with {self.label}: the "
                                       f"--hpml-compare-ref-budget of {self.budget:g} s is spent")
            return []
        at_ref, problem, absent = self.at_ref(item)
        if problem:
            for record in records:
                _all_new(record, problem if absent else f"not compared: {problem}")
            return []
        self._judge(records, at_ref)
        # An exact figure is the same in every process: measuring it again says nothing new.
        suspected = self.all or any(verdicts.outcome(m) not in (None, "unchanged", "new")
                                    and not m.exact for r in records for m in r.metrics)
        again: list[list[Record]] = []
        for i in range(self.processes - 1 if suspected else 0):
            if not self._left():
                records[0].warnings.append(f"{i + 1} of {self.processes} processes on each "
                                           "side: the --hpml-compare-ref-budget is spent")
                break
            # Alternate which side goes first, so neither always follows the other.
            for side in ("here", "ref") if i % 2 == 0 else ("ref", "here"):
                if side == "here":
                    more, problems = self.here(item)
                    again += more
                else:
                    more, problem, _ = self.at_ref(item)
                    at_ref += more
                    problems = [problem] if problem else []
                records[0].warnings += problems
        for record in records:
            measured = confirm.metrics_by_name(again, record.id)
            for m in record.metrics:
                values = [x for x in measured.get(m.name, []) if m.compared]
                m.runs = [x.value for x in values] or None
                relative = [x.relative for x in values]
                if m.relative is not None and values and None not in relative:
                    m.relative_runs = relative
        self._judge(records, at_ref)
        lines = [line for r in records for line in verdicts.failures(r, self.tolerance)]
        made = {r.id for r in records}
        for row in reference.rows_only_at_ref(at_ref, made):
            row.metrics = verdicts.compare_record(row, reference.base_metrics(at_ref, row.id))
            records.append(row)
            lines += verdicts.failures(row, self.tolerance)
        return lines

    @property
    def tolerance(self) -> float:
        return self.config.option.hpml_tolerance

    def _judge(self, records: list[Record], at_ref: list[list[Record]]) -> None:
        said = f"against {self.label} measured now, interleaved"
        for record in records:
            record.metrics = [m for m in record.metrics if verdicts.outcome(m) != "missing"]
            record.metrics.extend(verdicts.compare_record(
                record, reference.base_metrics(at_ref, record.id), self.tolerance,
                self.config.option.hpml_alpha, drift=0.0,
                max_detectable=self.config.option.hpml_max_detectable or None))
            for m in record.metrics:
                if m.verdict is not None and m.verdict.outcome != "new":
                    m.verdict = dataclasses.replace(
                        m.verdict, basis=f"{said}; {m.verdict.basis}" if m.verdict.basis
                        else said)


def _all_new(record: Record, why: str) -> None:
    for m in record.metrics:
        if m.compared:
            m.verdict = Verdict("new", basis=why)
    record.warnings.append(why)


REF_KEY = pytest.StashKey[RefComparison]()


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--hpml-compare-ref", rerun=False, metavar="REF", default=None,
               help="compare with the code at git REF (a branch, a tag, a commit) measured now: "
                    "the tests run at REF (a git worktree in a temporary folder) and here in "
                    "fresh processes, interleaved; no stored baseline")
    add_option(parser, "--hpml-compare-ref-all", action="store_true", rerun=False,
               help="with --hpml-compare-ref: measure every test again on both sides, not "
                    "only those the first pair of processes suspects")
    add_option(parser, "--hpml-compare-ref-processes", pin=True, rerun=False,
               type=positive(int), default=DEFAULT_PROCESSES, metavar="N",
               help="with --hpml-compare-ref: processes on each side behind the verdict of a "
                    f"suspected test ({DEFAULT_PROCESSES})")
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
    comparison = config.stash[REF_KEY] = RefComparison(config, ref, tree)
    comparison.worktree = own
    confirm.start_forkserver_in_background()
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
                     f"compared, the --hpml-compare-ref-budget of {comparison.budget:g} s "
                     f"spent before their tests: {'; '.join(left[:5])}"
                     + (" ..." if len(left) > 5 else ""))
