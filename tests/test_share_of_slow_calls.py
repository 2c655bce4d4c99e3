"""A time whose median moved only because a run's calls took their two speeds in another share,
or because the machine's compute pace moved with it, is said, not failed: on this shared
machine compute-bound calls ran at 8 ms for a few hundred milliseconds, then at 14 ms, by
turns, and an unchanged benchmark read 9.9 ms in a save and 16 ms in a compare (+61 %,
"confirmed" by three fresh processes that caught the same stretches); orjson's dump of
canada.json ran at 3.7 or 5.3 ms a call, scattered, and its median moved +35 % between runs of
the same code. A slowdown of every call, a slow path the calls never took before, and a move
beyond what the machine's pace explains are judged as before."""

from __future__ import annotations

import statistics

import pytest
from hpml_testing import FAST

from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules, judge_metric
from pytest_hpml.measure.yardstick import YardstickClock
from pytest_hpml.results import Metric, Replicates, Verdict

# The samples a run takes, in time order, by the pattern named in the file `pattern`: read in
# the test, so that the fresh processes of a confirmation read it too.
SUITE = """
    import random
    from pathlib import Path

    FAST_CALL, SLOW_CALL = 0.008, 0.020


    def samples(pattern):
        # Ten stretches of ten samples: slow in those named ("fast": none).
        slow_stretches = {"save": {2, 5, 8}, "fast": set()}.get(pattern, {1, 2, 3, 5, 6, 8, 9})
        slow = [k in slow_stretches for k in range(10) for _ in range(10)]
        if pattern == "scattered":
            random.Random(1).shuffle(slow)  # the same share, in no stretches
        scale = 1.5 if pattern == "slower" else 1.0
        if pattern == "uniform":  # every call at 16 ms, between the saved speeds
            return [0.016 * (1 + 0.001 * (i % 7)) for i in range(100)]
        return [scale * (SLOW_CALL if s else FAST_CALL) * (1 + 0.001 * (i % 7))
                for i, s in enumerate(slow)]


    def test_compute(hpml):
        pattern = Path(__file__).with_name("pattern").read_text()
        hpml.record_timing("time", samples(pattern))
"""


def _saved(pytester: pytest.Pytester, pattern: str) -> pytest.Pytester:
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_compute=SUITE)
    (pytester.path / "pattern").write_text(pattern)
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    return pytester


@pytest.fixture
def saved(pytester: pytest.Pytester) -> pytest.Pytester:
    """A save whose calls ran at 8 ms, and at 20 ms in three stretches of ten."""
    return _saved(pytester, "save")


def _compare(pytester: pytest.Pytester, pattern: str, *args: str) -> pytest.RunResult:
    (pytester.path / "pattern").write_text(pattern)
    return pytester.runpytest(*FAST, "--hpml-compare", *args)


@pytest.mark.parametrize("pattern", ["phases", "scattered"])
def test_the_same_two_speeds_in_another_share_is_said_not_failed(
        saved: pytest.Pytester, pattern: str) -> None:
    # 70 slow calls of 100 where the save had 30, in stretches (the machine) or scattered (an
    # allocator's state, a memory layout): speeds the saved calls already ran at.
    result = _compare(saved, pattern)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([
        "*time*the median moved +1*% while the fastest tenth of the calls moved *"
        "the share of slow calls changed, not their speed*"])
    # Said as what the run could not see, and failed where a team asks for that.
    _compare(saved, pattern, "--hpml-strict-blind-spots").assert_outcomes(failed=1)


@pytest.mark.parametrize("pattern", ["slower", "uniform"])
def test_every_call_slower_is_a_regression(saved: pytest.Pytester, pattern: str) -> None:
    # 1.5x slower in the same stretches; or every call at 16 ms, a speed between those the
    # saved calls ran at, but the fast calls are gone.
    result = _compare(saved, pattern)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*regressed: test_compute time:*"])


def test_a_slow_path_the_calls_never_took_before_is_judged(pytester: pytest.Pytester) -> None:
    _saved(pytester, "fast")  # every call at 8 ms
    result = _compare(pytester, "scattered")  # 70 of them now at 20 ms: a new slow path
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*regressed: test_compute time:*"])


def _pace_verdict(value: float, pace: float, tracked: bool = True,
                  history: tuple[float, ...] = (0.010, 0.0101, 0.0099)) -> Verdict:
    """A time of 10 ms saved with the machine's compute pace at 0.6 ms, judged now at
    `value` with the pace at `pace`: every call at one speed, moved whole, so that only the
    pace can hold a verdict back. `history`: the stored processes' values."""
    def samples(level: float) -> list[float]:
        return [level * (1 + 0.002 * ((7 * i) % 11)) for i in range(50)]

    base = Stored("time", 0.010, "s", "lower", samples=samples(0.010), compute_yardstick=6e-4,
                  history=list(history), history_saves=[len(history)])
    current = Metric("time", value, "s", "lower", samples=samples(value),
                     compute_yardstick=pace, pace_tracked=tracked or None)
    verdict = judge_metric(current, Replicates((value, value * 1.01, value * 0.99)), base,
                           Rules())
    assert verdict is not None
    return verdict


def test_a_machine_whose_compute_pace_moved_with_the_time_holds_the_verdict_back() -> None:
    held = _pace_verdict(0.018, 1.07e-3)  # +80 %, the pace +78 %: the machine's move
    assert held.outcome == "ambiguous", held
    assert "compute pace" in held.basis and held.blind, held
    # The same move with the pace held: the code's.
    assert _pace_verdict(0.018, 6.1e-4).outcome == "regressed"
    # A move beyond what the pace explains (+150 % against +78 %): judged.
    assert _pace_verdict(0.025, 1.07e-3).outcome == "regressed"
    # The pace moved the other way: it explains nothing.
    assert _pace_verdict(0.018, 4e-4).outcome == "regressed"
    # +105 % with the pace +78 % leaves +15 %: explained for a call whose samples moved with
    # the pace in its own run, not for one not seen to (a memory-bound add keeps its speed
    # while the loop slows; 50 % more work on one read +95 % while the pace moved +71 %).
    assert _pace_verdict(0.0205, 1.07e-3).outcome == "ambiguous"
    assert _pace_verdict(0.0205, 1.07e-3, tracked=False).outcome == "regressed"
    assert _pace_verdict(0.018, 1.07e-3, tracked=False).outcome == "ambiguous"


def test_a_one_process_baseline_in_another_stretch_is_not_judged_against() -> None:
    """Pure-Python calls of unchanged code read +72 % to +107 % in all three processes of a
    compare while the compute pace moved +64 %, against a save that kept one process of each
    in the machine's fast stretch (3 of 8 unchanged compares of a suite failed, 2026-11-28).
    With one stored process, how far a metric follows the pace is unknown: held back. With
    three, the rule for a call not seen to follow it stands (it catches 50 % more work on a
    memory-bound add); and with the pace held, a one-process baseline still judges."""
    one = (0.010,)
    held = _pace_verdict(0.0195, 0.98e-3, tracked=False, history=one)  # +95 %, pace +63 %
    assert held.outcome == "ambiguous" and "baseline holds one process" in held.basis, held
    assert held.blind, held
    assert _pace_verdict(0.0195, 0.98e-3, tracked=False).outcome == "regressed"
    assert _pace_verdict(0.0195, 6.1e-4, tracked=False, history=one).outcome == "regressed"
    # A move beyond the pace's own (a nap 4x longer while the pace moved +16.5 % under a CPU
    # hog) is the code's, one stored process or not.
    assert _pace_verdict(0.040, 7e-4, tracked=False, history=one).outcome == "regressed"


class _Stretches:
    """A clock and a machine that runs every call at 1 s in its fast stretches and 2 s in its
    slow ones (the compute-bound loop, likewise, 1 ms or 2 ms); a stretch lasts ten chunks of
    samples (a chunk here is one sample: the loop is short beside it)."""

    device = "cpu"

    def __init__(self, slow_stretches: set[int]) -> None:
        self.slow_stretches, self.chunk = slow_stretches, 0

    def speed(self) -> float:
        return 2.0 if self.chunk // 10 in self.slow_stretches else 1.0

    def run(self, fn, count, inner, *, time_left=None, warmup=False):  # noqa: ANN001
        return [self.speed()] * count

    def pace(self) -> float:
        seconds = self.speed() / 1000
        self.chunk += 1
        return seconds


class _Copy:
    def run(self) -> float:
        return 0.002


def _paced_run(slow_stretches: set[int]) -> tuple[float, float]:
    """The median and the compute pace of a timing of 100 samples, ten stretches of ten."""
    machine = _Stretches(slow_stretches)
    clock = YardstickClock(machine, _Copy(), pace=machine.pace)
    samples = []
    for _ in range(10):
        samples += clock.run(lambda: None, 10, 1)
    pace = clock.compute_seconds
    assert pace is not None
    return statistics.median(samples), pace


def test_the_compute_pace_pairs_each_chunk_with_the_loop_timed_next_to_it() -> None:
    # 3 of 10 stretches slow, then 7 of 10: the medians 1 s and 2 s, the code's time at the
    # pace of each moment the same.
    few, many = _paced_run({2, 5, 8}), _paced_run({1, 2, 3, 5, 6, 8, 9})
    assert few[0] == 1.0 and many[0] == 2.0
    assert few[0] / few[1] == pytest.approx(many[0] / many[1])
    # A median of the loop's two speeds would not: 1 ms and 2 ms, against 1 s and 2 s here
    # only because the shares fall on either side of a half.
    assert _paced_run(set())[1] == pytest.approx(0.001)


def test_the_pace_is_that_of_the_timed_samples_not_of_the_warm_up() -> None:
    # The machine slow for the warm-up's 30 chunks, fast for the 20 timed samples: the pace
    # of the timing is the fast one.
    machine = _Stretches({0, 1, 2})
    clock = YardstickClock(machine, _Copy(), pace=machine.pace)
    for _ in range(30):
        clock.run(lambda: None, 1, 1, warmup=True)
    clock.run(lambda: None, 20, 1)
    assert clock.compute_seconds == pytest.approx(0.001)


def test_samples_that_moved_with_the_pace_track_it_and_others_do_not() -> None:
    machine = _Stretches({1, 2, 3, 5, 6, 8, 9})
    clock = YardstickClock(machine, _Copy(), pace=machine.pace)
    clock.run(lambda: None, 100, 1)
    assert clock.tracks_pace  # 1 s or 2 s by stretch, 1 ms or 2 ms the loop beside them

    class Memory(_Stretches):
        def run(self, fn, count, inner, *, time_left=None, warmup=False):  # noqa: ANN001
            return [1.0] * count  # the loop slows, the call keeps its speed

    machine = Memory({1, 2, 3, 5, 6, 8, 9})
    clock = YardstickClock(machine, _Copy(), pace=machine.pace)
    clock.run(lambda: None, 100, 1)
    assert not clock.tracks_pace
    # A run at one pace shows nothing either way.
    steady = _Stretches(set())
    clock = YardstickClock(steady, _Copy(), pace=steady.pace)
    clock.run(lambda: None, 100, 1)
    assert not clock.tracks_pace
