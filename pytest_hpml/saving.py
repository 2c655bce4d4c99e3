"""--hpml-save-baseline: a run's measurements merged into this machine's baseline file (a pytest
plugin module; the file, read once before any test, is stored_baseline.BaselineRun's).

A save measures its tests again in fresh processes within a budget (compare/save_plan.py): at
the end of the run, one fresh process per round runs a batch of the tests whose history knows
least of the spread between processes, while the budget (--hpml-save-budget, a fraction of the
run's own time since pytest configured it) allows, up to --hpml-baseline-processes per
test. Then the engine judges each row against the file as it is (a change beyond the noise
starts a new level, a figure derived from a timing with its timing; a change seen in fewer
processes than a save measures is measured again in fresh processes first, as a comparison
confirms a suspected regression), and the store merges the rows in under its lock.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from pathlib import Path

import pytest

from pytest_hpml import policy, rerun
from pytest_hpml.compare import baselines, engine, history, save_plan, settling
from pytest_hpml.machine.fingerprint import fingerprint
from pytest_hpml.machine.revision import current_commit, tree_is_clean
from pytest_hpml.policy import positive
from pytest_hpml.report.files import Output
from pytest_hpml.results import Record
from pytest_hpml.session import add_option, writes_outputs
from pytest_hpml.stored_baseline import (
    BASELINE_KEY,
    FORKSERVER_BESIDE_ROWS,
    BaselineRun,
    some,
)

#: Processes behind a saved baseline at most: three medians are the fewest that give a spread.
DEFAULT_BASELINE_PROCESSES = 3
#: The share of the run's own time a save may spend in fresh processes. With the start of the
#: server and a process stopped at the deadline, 0.5 made a save 1.53-1.55x the run's own time
#: on a public suite of 64 tests (cattrs); 0.4 keeps it within 1.5x.
DEFAULT_SAVE_BUDGET = 0.4


class Save:
    """This run's save: its budget, what the run's tests took, and the file it writes."""

    def __init__(self, config: pytest.Config, stored: BaselineRun) -> None:
        opt = config.option
        self.config = config
        self.stored = stored
        self.run = stored.run
        self.keep: int = opt.hpml_baseline_runs
        self.reset: bool = opt.hpml_reset_baseline
        self.processes: int = opt.hpml_baseline_processes
        self.fraction: float = opt.hpml_save_budget
        self.durations: dict[str, float] = {}  # seconds of each test's call
        # CPU seconds this process had spent when its tests were collected: its imports
        # (pytest, the plugin, the project's modules, torch), about what a forkserver started
        # at the end would spend on the same preload list.
        self.imports_cpu = 0.0

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.imports_cpu = time.process_time()

    # -- the run's own time ------------------------------------------------------------------
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call" and report.passed:
            self.durations[report.nodeid] = report.duration

    # -- fresh processes -------------------------------------------------------------------
    def forkserver_start_estimate(self) -> float:
        """Seconds a forkserver started now would take to import what it preloads (an xdist
        controller, which collects nothing, has spent its CPU on its own imports and its
        workers' reports)."""
        return self.imports_cpu or time.process_time()

    def floor_foreseen(self) -> bool:
        """Whether this save will spend the floor, as far as the file read at the start tells:
        none yet, or a row whose history knows nothing of the spread between processes (a new
        test the file does not hold is found at the end, and starts the forkserver then)."""
        stored = self.stored.baseline
        if stored is None:
            return True
        return save_plan.floor(save_plan.knowledge(stored.metrics_for(rid).values())
                               for rid in stored.records) > 0

    def widen(self) -> None:
        """Measure the run's tests again in fresh processes, in rounds of batches, within the
        budget; their values join each row's replicates (engine.add_processes). A round's
        process is stopped when the budget is spent, and what it finished counts."""
        extra = self.processes - 1
        records = [r for r in self.run.records if r.id not in self.run.failed_ids
                   and r.test in self.durations and any(m.compared for m in r.metrics)]
        if extra < 1 or not records or not self.fraction:
            return
        by_test: dict[str, list[Record]] = {}
        for record in records:
            by_test.setdefault(record.test, []).append(record)
        stored = self.stored.baseline
        # Each test's stored metrics, gathered once for both questions the plan asks of them.
        stored_of = {t: [m for r in rows if stored for m in stored.metrics_for(r.id).values()]
                     for t, rows in by_test.items()}

        def known(test: str) -> int:
            return save_plan.knowledge(stored_of[test])

        def processes(test: str) -> int:
            return min(len(r.values_of(m.name).values) for r in by_test[test]
                       for m in r.metrics if m.compared)

        # The run's own time, without what the tests waited for the forkserver; that wait is
        # part of what the save adds to a run, so it is spent already.
        waited = rerun.forkserver_wait(self.config)
        own = max(0.0, time.monotonic() - self.run.started - waited)
        least = save_plan.floor(known(t) for t in stored_of)
        if not least and not rerun.forkserver_started():
            # Not started beside the collection (every test's history knew the spread between
            # processes when the run began): its start here comes out of the share, which may
            # not pay for it and one test's process (a 4 s suite's 0.4).
            start = self.forkserver_start_estimate()
            share = self.fraction * own
            if share < start + save_plan.ASSUMED_START + min(self.durations[t] for t in by_test):
                self.run.say_once(
                    f"--hpml-save-baseline: no test measured again in fresh processes: the "
                    f"share of this run a save may spend (--hpml-save-budget={self.fraction:g}"
                    f", {share:.1f} s) pays for no forkserver's start (about {start:.1f} s) and "
                    "one test's process; every test's history knows the spread between "
                    "processes, and each save adds another process on another occasion")
                return
        # The forkserver imports beside the collection where the floor was foreseen; what was
        # left of them when the tests began was waited for then (counted above). One not
        # started yet (an xdist controller collects nothing; a save of known tests) starts
        # here, and its start is spent too.
        waited += rerun.ready_forkserver(self.config)
        plan = save_plan.Plan(save_plan.budget(self.fraction, own, waited, least))
        deadline = time.monotonic() + plan.budget if math.isfinite(plan.budget) else None
        ranked = save_plan.order(by_test, known, self.durations.__getitem__)
        problems: list[str] = []
        for round_ in range(1, extra + 1):
            wanted = [t for t in ranked if processes(t) == round_]
            batch = plan.next_batch(wanted, self.durations.__getitem__)
            if not batch:
                break
            started = time.monotonic()
            fresh = rerun.run_fresh(self.config, batch, 1, what="baseline process",
                                    deadline=deadline)
            made = {r.test for records in fresh.records for r in records}
            plan.ran([t for t in batch if t in made], time.monotonic() - started,
                     sum(self.durations[t] for t in batch if t in made))
            engine.add_processes([r for t in batch for r in by_test[t]], fresh.records)
            problems += fresh.problems
        if problems:
            self.stored.rerun_failures += problems
        measured = {t for batch in plan.rounds for t in batch}
        if len(measured) < len(by_test) and math.isfinite(plan.budget):
            self.run.say_once(
                f"--hpml-save-baseline: {len(measured)} of {len(by_test)} test(s) measured "
                f"again in fresh processes ({len(plan.rounds)} round(s), {plan.spent:.1f} s of "
                f"a --hpml-save-budget of {plan.budget:.1f} s); the next saves measure the "
                "others, those whose history knows least of the spread between processes first"
                + ("" if least else
                   " (every test's history knows the spread between processes, and each save "
                   "adds another process on another occasion: a save spends no more than its "
                   "share)"))

    # -- the file ------------------------------------------------------------------------------
    def _judge_levels(self, records: list[Record]) -> baselines.Baseline | None:
        """Verdicts for the rows a comparison did not judge, against the file as it is now:
        a save starts a new level where the engine says a metric moved beyond the noise (a
        figure derived from a timing with its timing), in as many processes as a save measures
        (confirm_levels). Returns the file as it was judged against, which the store merges
        into where nothing rewrites it meanwhile."""
        found = self.stored.baseline_now()
        if found is not None:
            self.confirm_levels([r for r in records if not r.verdicts], found)
        return found

    def _moves_level(self, record: Record) -> bool:
        """Whether a verdict of the row would start a new level on fewer processes than a save
        measures (--hpml-baseline-processes), in a test the save may run again."""
        if record.test not in self.durations:
            return False
        for name, verdict in record.verdicts.items():
            m = record.metric(name)
            if verdict.outcome in history.LEVEL_CHANGES and m is not None and m.compared and \
                    not m.exact and not m.derived_from and \
                    len(record.values_of(name).values) < self.processes:
                return True
        return False

    def confirm_levels(self, records: list[Record], found: baselines.Baseline) -> None:
        """Judge `records` against `found` for levels; a move that would start a new level on
        fewer processes than the save measures is measured again in fresh processes (its rows
        only, where the test asks hpml.wants), one at a time while it still shows, up to
        --hpml-baseline-processes, as a comparison confirms a suspected regression. A level
        resting on one process was a preempted call in one row of a 10 000-row sweep at almost
        every save (2.6 -> 20 us), which dropped the row's history and made the next
        comparison read the row `improved`; a save of unchanged code that suspects nothing
        runs no process for it."""
        # The file as the run's judgements read it, where no save rewrote it since: their
        # rules, worked out once.
        rules = self.stored.source.rules_against(self.stored.rules, found)
        memo = engine.FamilyMemo()
        by_test: dict[str, list[Record]] = {}
        for record in records:
            by_test.setdefault(record.test, []).append(record)
        asked: set[str] = set()  # ids of the rows measured again

        def judge_all(_left: int, rows: list[Record]) -> None:
            engine.judge_rows(records, found.metrics_for, rules, levels_only=True, rows=rows,
                              memo=memo)

        def measure_more(pending: list[Record]) -> None:
            tests = sorted({r.test for r in pending})
            made = [r for t in tests for r in by_test[t]]
            fresh = rerun.run_fresh(self.config, tests, 1, what="level confirmation",
                                    rows=pending, made=made)
            engine.add_processes(made, fresh.records)
            self.stored.rerun_failures += fresh.problems
            asked.update(r.id for r in pending)

        # A sweep of thousands of single calls has a preempted one at almost every save: the
        # server's imports run beside its judging, as a comparison's do.
        rounds = max(0, self.processes - 1)
        beside = rounds > 0 and len(records) >= FORKSERVER_BESIDE_ROWS
        with rerun.forkserver_beside(self.config, wanted=True) if beside else nullcontext():
            settling.settle(records, judge_all, self._moves_level, measure_more, rounds)
        if asked:
            started = sum(1 for r in records if r.id in asked and any(
                v.outcome in history.LEVEL_CHANGES for v in r.verdicts.values()))
            self.run.say_once(
                f"--hpml-save-baseline: {len(asked)} row(s) whose move would have started a "
                "new level on fewer processes than a save measures were measured again in fresh "
                f"processes (up to --hpml-baseline-processes={self.processes}): {started} moved "
                "in them too, "
                f"{len(asked) - started} did not (an outlier of one process: no new level)")

    def write(self) -> list[Path]:
        records = self.run.records
        passed = [r for r in records if r.id not in self.run.failed_ids]
        if len(passed) < len(records):
            self.run.say_once(f"--hpml-save-baseline: {len(records) - len(passed)} row(s) of "
                              "tests that did not pass (failed, xfail, or an error in teardown) "
                              "not saved; their previous baseline entries are kept.")
        if not passed:
            return []
        # The file as this run last read it (checked then): where another save rewrote it
        # after the start, the judging read it again, and the store need not a third time.
        known = self.stored.baseline if self.reset else self._judge_levels(passed)
        pruned = self.stored.pruned
        path = self.stored.path
        merge = history.MergePolicy(
            keep=self.keep, reset=self.reset, prune=pruned,
            commit=current_commit(self.config.rootpath),  # dated by the store, under its lock
            clean=tree_is_clean(self.config.rootpath, leave_out=path.parent))
        saved = baselines.save(path, fingerprint(), self.stored.profile, passed, merge,
                               known=known)
        self.run.new_levels += saved.levels
        if saved.levels:
            self.run.say_once(
                f"--hpml-save-baseline: {len(saved.levels)} metric(s) changed beyond what this "
                "machine can detect; their history starts at the new level (the previous one "
                "is kept in the file as accepted): " + some(saved.levels))
        if saved.kept:
            self.run.say_once(
                f"--hpml-save-baseline: {len(saved.kept)} metric(s) moved beyond what this "
                "machine can detect without starting a new level (at the commit the last save "
                "measured, or back at the level before their last accepted change): the "
                "history keeps both, as drift or a benchmark's modes: " + some(saved.kept))
        if pruned:
            self.run.say_once(f"--hpml-save-baseline: dropped {len(pruned)} row(s) of "
                              "tests that are gone (--hpml-prune-baseline)")
        if saved.skipped:
            self.run.say_once(f"--hpml-save-baseline: {len(saved.skipped)} metric(s) are not "
                              "numbers (NaN or inf: not a level) and were not saved: "
                              + "; ".join(saved.skipped[:5])
                              + (" ..." if len(saved.skipped) > 5 else ""))
        return [path]  # a symlink is shown with the file it links to


SAVE_KEY = pytest.StashKey[Save]()


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    # The save is the outer run's (rerun=False): a fresh process only measures.
    add_option(parser, "--hpml-save-baseline", action="store_true", rerun=False,
               help="merge this run's results into this machine's baseline file")
    add_option(parser, "--hpml-baseline-runs", pin=True, rerun=False, type=positive(int),
               default=history.DEFAULT_KEEP, metavar="N",
               help="runs of history a baseline keeps per metric, so the run-to-run spread is "
                    f"known ({history.DEFAULT_KEEP})")
    add_option(parser, "--hpml-baseline-processes", pin=True, rerun=False, type=positive(int),
               default=DEFAULT_BASELINE_PROCESSES, metavar="N",
               help="processes a save measures a test in at most (the run's own and up to N-1 "
                    "fresh ones, within --hpml-save-budget), so the baseline learns the spread "
                    "between processes; a move that would start a new level is measured in as "
                    f"many before it does ({DEFAULT_BASELINE_PROCESSES}; 1: the run alone)")
    add_option(parser, "--hpml-save-budget", pin=True, rerun=False, type=policy.budget,
               default=DEFAULT_SAVE_BUDGET, metavar="FRACTION",
               help="seconds a save may spend measuring its tests again in fresh processes, as "
                    "a fraction of the run's own time: the tests whose history knows least of "
                    "the spread between processes first, the others in later saves "
                    f"({DEFAULT_SAVE_BUDGET}: a save costs at most about 1.5 runs, and "
                    f"{save_plan.MIN_BUDGET:g} s at least until a save has measured every test "
                    "in more than one process; 0: none; all: every test in "
                    "--hpml-baseline-processes processes, whatever it costs)")
    add_option(parser, "--hpml-prune-baseline", action="store_true", rerun=False,
               help="with --hpml-save-baseline: drop the rows of tests that are gone from the "
                    "suite (or no longer make them); without it they are kept, and said")
    add_option(parser, "--hpml-reset-baseline", action="store_true", rerun=False,
               help="with --hpml-save-baseline: restart the history of the saved rows "
                    "instead of appending to it (after a hardware or driver change)")


@pytest.hookimpl(trylast=True)  # after stored_baseline has read the file
def pytest_configure(config: pytest.Config) -> None:
    opt = config.option
    for given, what in ((opt.hpml_reset_baseline, "--hpml-reset-baseline restarts the history "
                                                  "of the rows a save stores"),
                        (opt.hpml_prune_baseline, "--hpml-prune-baseline drops, in a save, the "
                                                  "rows of tests that are gone")):
        if given and not opt.hpml_save_baseline:
            raise pytest.UsageError(f"{what}: add --hpml-save-baseline (or leave the option "
                                    "out)")
    if not (opt.hpml_save_baseline and writes_outputs(config)):
        return
    save = config.stash[SAVE_KEY] = Save(config, config.stash[BASELINE_KEY])
    config.pluginmanager.register(save, f"hpml-save-{id(config)}")
    if save.processes > 1 and save.fraction and (math.isinf(save.fraction)
                                                 or save.floor_foreseen()):
        # Beside the collection, where the save will spend its floor (save_plan.floor): the
        # tests wait for what is left of its imports; and where every test is measured again
        # (--hpml-save-budget=all). A save of tests whose histories know the spread between
        # processes spends its share only, and starts it at the end if the share pays for it
        # (a 4 s suite's tests waited 2-3 s for imports its save never used).
        rerun.start_forkserver_in_background(config)


@pytest.hookimpl(tryfirst=True)
def pytest_hpml_finish(session: pytest.Session) -> None:
    # Before the rows the run did not make are judged, and before anything is written.
    save = session.config.stash.get(SAVE_KEY, None)
    if save is not None:
        save.widen()


def pytest_hpml_outputs(config: pytest.Config) -> list[Output]:
    save = config.stash.get(SAVE_KEY, None)
    return [Output("baseline", save.stored.path, save.write)] if save is not None else []
