"""A save costs about what a run costs (issue 28): fresh processes within a budget, in rounds of
batches, the tests whose history knows least of the spread between processes first; the next
save measures the others."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST

from pytest_hpml import rerun, saving
from pytest_hpml.compare import save_plan
from pytest_hpml.compare.stored import Stored
from pytest_hpml.results import Metric, Record


def test_the_plan_fits_its_batches_in_the_budget_and_learns_the_start_up() -> None:
    durations = {"a": 1.0, "b": 2.0, "c": 0.5, "d": 3.0}
    plan = save_plan.Plan(budget=5.0)  # a start-up of 1 s is assumed until one is timed
    batch = plan.next_batch(["a", "b", "c", "d"], durations.__getitem__)
    assert batch == ["a", "b", "c"]  # 3.5 s of tests and 1 s of start-up; d would not fit
    plan.ran(batch, seconds=4.0, tests_seconds=3.5)
    assert plan.spent == 4.0 and plan.start == 0.5
    assert plan.next_batch(["d"], durations.__getitem__) == []  # 1 s left: not enough for d
    assert plan.next_batch(["c"], durations.__getitem__) == ["c"]


def test_the_budget_is_the_runs_share_less_what_was_spent_and_never_below_the_floor() -> None:
    assert save_plan.budget(0.4, own=100.0, spent=2.0) == pytest.approx(38.0)
    # A one-test run of 3 s whose share went on waiting for the forkserver: the floor, so that
    # its baseline is not one process that knows nothing of the spread between processes.
    assert save_plan.budget(0.4, own=3.0, spent=1.5) == save_plan.MIN_BUDGET
    assert save_plan.budget(float("inf"), own=3.0, spent=1.5) == float("inf")


def test_the_floor_holds_until_a_save_has_measured_every_test_in_more_than_one_process(
        ) -> None:
    assert save_plan.floor([2, 0]) == save_plan.MIN_BUDGET  # a new test beside known ones
    assert save_plan.floor([1, 1]) == 0.0  # each known from a save of two processes
    assert save_plan.floor([]) == 0.0
    assert save_plan.budget(0.1, own=1.0, spent=0.0, least=0.0) == pytest.approx(0.1)


def test_a_short_suite_pays_the_floor_for_its_first_save_and_its_share_after(
        pytester: pytest.Pytester, batches: list[list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The floor buys a first save's tests a second process, with the forkserver started
    beside the collection; once every test's history knows the spread between processes, a
    save whose share pays for no forkserver's start and one test's process starts none and
    measures nothing again, and says why."""
    started: list[bool] = []
    monkeypatch.setattr(rerun, "start_forkserver_in_background",
                        lambda config: started.append(True))
    monkeypatch.setattr(saving.Save, "forkserver_start_estimate", lambda self: 2.0)
    # No server runs (one another test of this worker started may still be running).
    monkeypatch.setattr(rerun, "forkserver_started", lambda: False)
    pytester.makepyfile(test_naps=SHORT_SUITE)
    args = (*FAST[:-1], "--hpml-save-baseline", "--hpml-baseline-processes=2",
            "--hpml-save-budget=0.05")
    pytester.runpytest(*args).assert_outcomes(passed=3)
    assert len(batches) == 1 and sorted(batches[0]) == [
        f"test_naps.py::test_nap[{k}]" for k in range(3)], batches
    assert started == [True]
    batches.clear()
    started.clear()
    last = pytester.runpytest(*args)
    last.assert_outcomes(passed=3)
    assert batches == [] and started == []
    last.stdout.fnmatch_lines(["*no test measured again in fresh processes: the share of this "
                               "run*pays for no forkserver's start (about 2.0 s) and one test's "
                               "process*"])


SHORT_SUITE = """
    import time

    import pytest

    @pytest.mark.parametrize("k", range(3))
    def test_nap(hpml, k):
        time.sleep(0.1)
        hpml.record("work", 1.0 + k, unit="B", better="lower")
"""


def test_a_short_suite_whose_share_went_on_the_wait_is_still_measured_again(
        pytester: pytest.Pytester, batches: list[list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_naps=SUITE)
    monkeypatch.setattr(rerun, "wait_for_forkserver", lambda: 3.0)
    pytester.runpytest(*FAST[:-1], "--hpml-save-baseline", "--hpml-baseline-processes=2",
                       "--hpml-save-budget=0.6").assert_outcomes(passed=6)
    assert batches and batches[0]


def test_tests_that_know_least_of_the_spread_come_first() -> None:
    def stored(*saves: int) -> Stored:
        return Stored("time", 1.0, "s", "lower", history=[1.0] * sum(saves),
                      history_saves=list(saves))

    assert save_plan.knowledge([]) == 0  # a new test
    assert save_plan.knowledge([stored(1, 1, 1)]) == 0  # saves of one process each
    assert save_plan.knowledge([stored(3, 1)]) == 2
    assert save_plan.knowledge([stored(3), stored(2)]) == 1  # the row's least known metric
    known = {"new": 0, "old": 2, "half": 1}
    durations = {"new": 5.0, "old": 0.1, "half": 0.1}
    assert save_plan.order(known, known.__getitem__, durations.__getitem__) == [
        "new", "half", "old"]


SUITE = """
    import time

    import pytest

    @pytest.mark.parametrize("k", range(6))
    def test_nap(hpml, k):
        time.sleep(0.5)
        hpml.record("work", 1.0 + k, unit="B", better="lower")
"""


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The batches the save asks fresh processes for; each answers at once with the values
    the tests would make (the budget, not the machine, decides what is measured)."""
    asked: list[list[str]] = []

    def fresh(config, nodeids, processes=1, place=None, what="", deadline=None):
        asked.append(list(nodeids))
        made = [Record(n, n.split("[")[0], metrics=[
            Metric("work", 1.0 + int(n.split("[")[1][:-1]), "B", "lower")], test=n)
            for n in nodeids]
        return rerun.Fresh(records=[made])

    monkeypatch.setattr(rerun, "run_fresh", fresh)
    # No process is forked, so no forkserver is started, nor its imports spent from the budget.
    monkeypatch.setattr(rerun, "start_forkserver_in_background", lambda config: None)
    monkeypatch.setattr(rerun, "ready_forkserver", lambda config: 0.0)
    monkeypatch.setattr(saving.Save, "forkserver_start_estimate", lambda self: 0.0)
    return asked


def test_a_save_spends_its_budget_on_what_it_knows_least_and_the_next_save_on_the_rest(
        pytester: pytest.Pytester, batches: list[list[str]]) -> None:
    pytester.makepyfile(test_naps=SUITE)
    # Six tests of half a second: a budget of 0.6 of the run (3 s and more) leaves room for a
    # second of start-up and some of the tests, not all of them.
    first = pytester.runpytest(*FAST[:-1], "--hpml-save-baseline",
                               "--hpml-baseline-processes=2", "--hpml-save-budget=0.6")
    first.assert_outcomes(passed=6)
    assert len(batches) == 1 and 0 < len(batches[0]) < 6, batches
    again = set(batches[0])
    first.stdout.fnmatch_lines([f"hpml: --hpml-save-baseline: {len(again)} of 6 test(s) "
                                "measured again in fresh processes (1 round(s), * s of a "
                                "--hpml-save-budget of * s); the next saves measure the others*"])
    stored = json.loads(next((pytester.path / "baselines").glob("*.json")).read_text())
    saves = {r["id"]: r["metrics"][0]["history_saves"] for r in stored["records"]}
    assert {k for k, s in saves.items() if s == [2]} == again
    # The next save measures first the tests the first one left with one process.
    batches.clear()
    pytester.runpytest(*FAST[:-1], "--hpml-save-baseline", "--hpml-baseline-processes=2",
                       "--hpml-save-budget=0.6").assert_outcomes(passed=6)
    assert batches and batches[0]
    unmeasured = [t for t in batches[0] if t not in again]
    assert unmeasured and batches[0][:len(unmeasured)] == unmeasured, batches


def test_no_budget_means_no_fresh_process(pytester: pytest.Pytester,
                                          batches: list[list[str]]) -> None:
    pytester.makepyfile(test_naps=SUITE)
    pytester.runpytest(*FAST[:-1], "--hpml-save-baseline", "--hpml-save-budget=0"
                       ).assert_outcomes(passed=6)
    assert batches == []


def test_the_wait_for_the_forkserver_is_spent_from_the_budget(
        pytester: pytest.Pytester, batches: list[list[str]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests wait for what is left of the forkserver's imports before the first sample (no
    import beside a timed sample): that wait is the save's cost, not the run's, so it comes out
    of the budget twice (the run's own time without it, then spent). A wait as long as the run
    leaves nothing for fresh processes; the same save without it measures some again."""
    pytester.makepyfile(test_naps=SUITE)
    monkeypatch.setattr(save_plan, "MIN_BUDGET", 0.0)  # the share alone (the floor: below)

    def waited(seconds: float) -> None:
        monkeypatch.setattr(rerun, "wait_for_forkserver", lambda: seconds)

    waited(3.0)  # six tests of half a second: the run's own time is about 3 s
    pytester.runpytest(*FAST[:-1], "--hpml-save-baseline", "--hpml-baseline-processes=2",
                       "--hpml-save-budget=0.6").assert_outcomes(passed=6)
    assert batches == []
    waited(0.0)
    pytester.runpytest(*FAST[:-1], "--hpml-save-baseline", "--hpml-baseline-processes=2",
                       "--hpml-save-budget=0.6").assert_outcomes(passed=6)
    assert batches and batches[0]
