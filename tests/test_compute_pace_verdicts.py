"""The machine's compute pace makes verdicts where the history shows it tracks a metric (issue
27): a time relative to the pace loop timed beside its samples, judged like the values relative
to the memcpy yardstick. On 2026-11-27 this machine ran Python-heavy calls at two speeds by
turns, and the pace loop moved with them test by test (orjson's suite, a save in a slow stretch
and four compares: the value and the pace moved -44 %/-43 %, -47 %/-44 %, +33 %/+30 %): the
values as measured spread by tens of percent between saves, relative to the pace by a few."""

from __future__ import annotations

import random
import statistics
import subprocess

import pytest

from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import PACED, Rules, judge_metric
from pytest_hpml.replicates import Replicates
from pytest_hpml.results import Metric

WORK = 1e-3  # seconds of the call at the pace of 1.0
LOOP = 0.6e-3  # seconds of the pace loop at the pace of 1.0


def _process(rng: random.Random, pace: float, work: float = WORK) -> tuple[float, float]:
    """One process: its median time and its compute pace, both moved by the machine's pace."""
    return work * pace * rng.uniform(0.985, 1.015), LOOP * pace * rng.uniform(0.99, 1.01)


def _stored(rng: random.Random, paces: list[float]) -> Stored:
    """Three saves of three processes each, each save at its own pace of the machine."""
    runs = [_process(rng, pace) for pace in paces for _ in range(3)]
    value, loop = runs[-1]
    return Stored("time", value, "s", "lower", compute_yardstick=loop, notch=0.004,
                  n=50, history=[v for v, _ in runs], paced_history=[v / p for v, p in runs],
                  history_saves=[3] * len(paces))


def _now(rng: random.Random, pace: float, work: float = WORK) -> tuple[Metric, Replicates]:
    runs = [_process(rng, pace, work) for _ in range(3)]
    value, loop = runs[0]
    samples = [value * rng.uniform(0.99, 1.01) for _ in range(50)]
    metric = Metric("time", value, "s", "lower", samples=samples, compute_yardstick=loop)
    return metric, Replicates(tuple(v for v, _ in runs), None, tuple(v / p for v, p in runs))


def test_a_slowdown_the_machines_pace_hides_is_caught_relative_to_it() -> None:
    rng = random.Random(1)
    base = _stored(rng, [1.0, 1.6, 1.2])
    # 30 % more work, measured while the machine runs at its fast pace: +8 % as measured
    # against the last save, within the drift between saves that the raw history shows.
    metric, now = _now(rng, 1.0, work=1.3 * WORK)
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "regressed", verdict
    assert verdict.relative and PACED in verdict.basis
    # As measured alone (no pace beside the values), the same run cannot be told from drift.
    raw = judge_metric(metric, Replicates(now.values), base, Rules())
    assert raw is not None and raw.outcome != "regressed", raw


def test_the_same_code_at_a_slow_pace_is_unchanged_relative_to_it() -> None:
    rng = random.Random(2)
    base = _stored(rng, [1.0, 1.1, 1.0])
    metric, now = _now(rng, 1.7)  # every call 1.7x slower, the pace loop too: +70 % measured
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "unchanged", verdict
    assert PACED in verdict.basis


def test_a_pace_that_does_not_track_the_metric_is_not_used() -> None:
    # A memory-bound call keeps its speed while the loop slows (the memcpy and a torch add
    # kept theirs in the slow stretches): relative to the pace it would spread more.
    rng = random.Random(3)
    runs = [(WORK * rng.uniform(0.985, 1.015), LOOP * pace) for pace in (1.0, 1.7, 1.2)
            for _ in range(3)]
    base = Stored("time", runs[-1][0], "s", "lower", compute_yardstick=runs[-1][1],
                  notch=0.004, n=50, history=[v for v, _ in runs],
                  paced_history=[v / p for v, p in runs], history_saves=[3, 3, 3])
    values = [WORK * rng.uniform(0.985, 1.015) for _ in range(3)]
    metric = Metric("time", values[0], "s", "lower", compute_yardstick=LOOP * 1.7,
                    samples=[values[0] * rng.uniform(0.99, 1.01) for _ in range(50)])
    now = Replicates(tuple(values), None, tuple(v / (LOOP * 1.7) for v in values))
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "unchanged", verdict
    assert not verdict.relative
    assert "the compute pace does not track this metric" in verdict.basis



def test_a_slowdown_beside_a_pace_move_is_judged_where_the_pace_never_tracked() -> None:
    """A call that waits (a sleep) keeps its time while the pace loop moves: nine runs show the
    pace does not track it. 50 % more waiting, measured while a neighbour slowed the loop by
    about as much, is the code's: a regression, not the machine's move held back (under a CPU
    hog a sleep 50 % longer read +6.4 % relative to a pace moved +40.7 %, and was held back)."""
    rng = random.Random(5)
    paces = (1.0, 1.7, 1.2)
    runs = [(WORK * rng.uniform(0.985, 1.015), LOOP * pace * rng.uniform(0.99, 1.01))
            for pace in paces for _ in range(3)]
    base = Stored("time", runs[-1][0], "s", "lower", compute_yardstick=runs[-1][1],
                  notch=0.004, n=50, history=[v for v, _ in runs],
                  paced_history=[v / p for v, p in runs], history_saves=[3, 3, 3])
    loop = runs[-1][1] * 1.45  # the pace moved with the slowdown: +3 % left relative to it
    values = [1.5 * WORK * rng.uniform(0.995, 1.005) for _ in range(3)]
    metric = Metric("time", values[0], "s", "lower", compute_yardstick=loop,
                    samples=[values[0] * rng.uniform(0.99, 1.01) for _ in range(50)])
    now = Replicates(tuple(values), None, tuple(v / loop for v in values))
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "regressed", verdict
    assert "the compute pace does not track this metric" in verdict.basis
    # Without the pace's history (a baseline from before it was kept), the same move is held
    # back as the machine's: nothing says the pace does not explain it.
    blind = Stored("time", base.value, "s", "lower", compute_yardstick=base.compute_yardstick,
                   notch=0.004, n=50, history=list(base.history),
                   history_saves=[3, 3, 3])
    held = judge_metric(metric, Replicates(now.values), blind, Rules())
    assert held is not None and held.outcome == "ambiguous" and "compute pace" in held.basis, \
        held

def test_a_pace_seen_over_too_few_runs_makes_no_verdict() -> None:
    """Two processes a side are four runs: too few to tell whether the pace tracks the call.
    Judged as measured, +70 % with the pace at +70 % is the machine's move, held back."""
    rng = random.Random(4)
    runs = [_process(rng, 1.0) for _ in range(2)]
    base = Stored("time", runs[-1][0], "s", "lower", compute_yardstick=runs[-1][1],
                  notch=0.004, n=50, history=[v for v, _ in runs],
                  paced_history=[v / p for v, p in runs], history_saves=[2])
    metric, now = _now(rng, 1.7)
    now = Replicates(now.values[:2], None, now.paced[:2])
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "ambiguous" and not verdict.relative, \
        verdict
    assert "compute pace" in verdict.basis


def test_a_save_keeps_each_process_relative_to_its_compute_pace(pytester: pytest.Pytester) -> None:
    """The history relative to the pace is the tail of the history as measured, process for
    process, save after save, in the user's own baseline file."""
    import json

    from hpml_testing import FAST, only_baseline_file

    pytester.makepyfile("""
        def test_sum(hpml):
            hpml.time(sum, range(2000))
    """)
    # Two saves of the same commit from a clean tree: a move between them (a CPU hog beside
    # them read 59 us, then 33 us) is the machine's, kept in one history, not a new level.
    (pytester.path / ".gitignore").write_text("baselines/\n__pycache__/\n")
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "suite"]):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *command],
                       cwd=pytester.path, check=True, capture_output=True)
    for _ in range(2):
        pytester.runpytest_subprocess(*FAST, "--hpml-save-baseline",
                                      "--hpml-baseline-processes=2", "--hpml-save-budget=all",
                                      ).assert_outcomes(passed=1)
    saved = json.loads(only_baseline_file(pytester.path / "baselines").read_text())
    stored = saved["records"][0]["metrics"][0]
    assert stored["history_saves"] == [2, 2]
    assert len(stored["paced_history"]) == len(stored["history"]) == 4
    for value, paced in zip(stored["history"], stored["paced_history"], strict=True):
        # Relative to its own process's pace: near the latest pace's ratio, within a factor
        # the machine's moves allow (a CPU hog beside make test put one 8.6 times the other),
        # far from a value left as measured (the pace is a loop's time, about 1e-5 s here).
        ratio = paced * stored["compute_yardstick"] / value
        assert 0 < paced and 0.01 < ratio < 100, (value, paced, stored["compute_yardstick"])


def _together(rng: random.Random, paces: list[float], work: float = WORK
              ) -> tuple[list[float], list[float]]:
    runs = [_process(rng, pace, work) for pace in paces]
    return [v for v, _ in runs], [v / p for v, p in runs]


def test_a_slowdown_whose_processes_ran_at_two_speeds_is_judged_relative_to_the_pace() -> None:
    """One save of three processes in a slow stretch; 50 % more work, its processes at the slow
    and the fast speed: as measured +50 %, -12 %, +50 % (two levels the save never saw, once
    held back as a switch of modes), relative to the pace +50 % in each. Within each occasion
    the pace narrows the spread: it tracks the call, whatever the change between them."""
    rng = random.Random(6)
    history, paced = _together(rng, [1.7, 1.7, 1.7])
    base = Stored("time", history[-1], "s", "lower", compute_yardstick=LOOP * 1.7,
                  notch=0.004, n=50, history=history, paced_history=paced,
                  history_saves=[3])
    values, now_paced = _together(rng, [1.7, 1.0, 1.7], work=1.5 * WORK)
    metric = Metric("time", values[0], "s", "lower", compute_yardstick=LOOP * 1.7,
                    samples=[values[0] * rng.uniform(0.99, 1.01) for _ in range(50)])
    verdict = judge_metric(metric, Replicates(tuple(values), None, tuple(now_paced)), base,
                           Rules())
    assert verdict is not None and verdict.outcome == "regressed", verdict
    assert verdict.relative and PACED in verdict.basis
    # As measured alone the same processes are a switch of modes, not judged.
    raw = judge_metric(metric, Replicates(tuple(values)), base, Rules())
    assert raw is not None and raw.outcome == "ambiguous" and "bimodal" in raw.basis, raw


def test_a_slowdown_a_faster_stretch_hides_is_measured_again_then_held_back() -> None:
    """20 % more work in a stretch 40 % faster than the save's reads -29 % as measured: an
    `improved` that the time relative to its pace (+20 %) contradicts. With fresh processes to
    come it is measured again; on a finished run it is held back as the machine's move."""
    rng = random.Random(7)
    history, paced = _together(rng, [1.7, 1.7, 1.7])
    base = Stored("time", history[-1], "s", "lower", compute_yardstick=LOOP * 1.7,
                  notch=0.004, n=50, history=history, paced_history=paced,
                  history_saves=[3])
    value, loop = _process(rng, 1.0, work=1.2 * WORK)
    metric = Metric("time", value, "s", "lower", compute_yardstick=loop,
                    samples=[value * rng.uniform(0.99, 1.01) for _ in range(50)])
    now = Replicates((value,), None, (value / loop,))
    assert now.values[0] < min(history)
    first = judge_metric(metric, now, base, Rules(), can_confirm=2)
    assert first is not None and first.outcome == "suspect" and first.relative, first
    final = judge_metric(metric, now, base, Rules())
    assert final is not None and final.outcome == "ambiguous" and final.blind, final
    assert "the other way" in final.basis


def _faster_stretch(seed: int, fast: float) -> tuple[Metric, Replicates, Stored]:
    """50 % more work, two of its three processes in a stretch `fast` times the save's speed,
    against one save of three processes at the save's speed."""
    rng = random.Random(seed)
    history, paced = _together(rng, [1.0, 1.0, 1.0])
    base = Stored("time", history[-1], "s", "lower", compute_yardstick=LOOP, notch=0.004,
                  n=50, history=history, paced_history=paced, history_saves=[3])
    values, now_paced = _together(rng, [1.0, fast, fast], work=1.5 * WORK)
    metric = Metric("time", values[0], "s", "lower", compute_yardstick=LOOP,
                    samples=[values[0] * rng.uniform(0.99, 1.01) for _ in range(50)])
    return metric, Replicates(tuple(values), None, tuple(now_paced)), base


def test_a_slowdown_that_reads_faster_as_measured_is_caught_where_this_run_moved_with_the_pace(
        ) -> None:
    """Two processes in a stretch 1.6x faster: as measured the median moved -4 %, relative to
    the pace +50 % in each process. This run's own processes moved with the pace, so the
    verdict relative to it is not a pace that moved on its own (which is judged as measured:
    test_drift_and_yardstick)."""
    metric, now, base = _faster_stretch(8, 1 / 1.6)
    assert -0.1 < statistics.median(now.values) / statistics.median(base.history) - 1 < 0
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "regressed" and verdict.relative, verdict
    assert "between processes run together" in verdict.basis


def test_a_move_as_measured_beyond_the_tolerance_the_other_way_is_not_judged() -> None:
    """The same 50 % more work in a stretch 1.8x faster reads -17 % as measured: the values
    moved beyond the tolerance against the verdict relative to the pace. A metric that follows
    the pace by less than the pace moved (a softmax: -19.2 % as measured, +26.8 % relative to
    a pace 1.57x faster, unchanged code) reads just so: neither fails."""
    metric, now, base = _faster_stretch(8, 1 / 1.8)
    assert statistics.median(now.values) / statistics.median(base.history) - 1 < -0.1
    verdict = judge_metric(metric, now, base, Rules())
    assert verdict is not None and verdict.outcome == "ambiguous", verdict
    assert "beyond the 10.0 % tolerance the other way" in verdict.basis
