"""hpml.time of short CPU calls carries none of the harness's own cost: between the two clock
readings of every sample the sampler takes (warm-up, choosing the calls per sample, the
samples), nothing runs but one call into the compiled loop and the timed calls themselves.

This is checked by what runs, not by how long it takes: a profiler hook (sys.setprofile) sees
every Python call and every call of a C function. Before issue 23 the sampler added a closure
call, the argument unpacking and a clock reading to every call (60-150 ns here: a no-op came
out at 4 to 7 times its cost), and each of them would be a call event between the readings.
Whether the times themselves are unbiased is measured, not unit-tested (timings on a shared
machine move by tens of percent): tools/timing_accuracy.py times the same calls with
hpml.time, torch.utils.benchmark and timeit side by side (README, "Timing accuracy").
"""

from __future__ import annotations

import sys
import time
from types import CodeType
from typing import Any

import pytest

from pytest_hpml.measure.clocks import CpuClock
from pytest_hpml.measure.timing import TimingConfig, measure


def unit(scale: float, *, offset: float = 0.0) -> float:
    """A short pure-Python call: any call event inside a sample other than this one's is the
    harness's."""
    x = scale * 1.000001
    return x + offset


def _events_of(run: Any) -> list[tuple[str, Any]]:
    """(event, code or C function) of every call made while run() runs."""
    events: list[tuple[str, Any]] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call":
            events.append(("call", frame.f_code))
        elif event == "c_call":
            events.append(("c_call", arg))

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return events


def _timed_stretches(events: list[tuple[str, Any]], timed: CodeType
                     ) -> list[list[tuple[str, Any]]]:
    """The calls between consecutive clock readings, of each stretch that ran the timed call.
    A second reading beside one of a sample's two (nothing run between them) is in the sample
    too: it is reported as a stretch of its own, ["clock reading"]."""
    stretches: list[list[tuple[str, Any]]] = [[]]
    for event in events:
        if event == ("c_call", time.perf_counter_ns):
            stretches.append([])
        else:
            stretches[-1].append(event)
    timed_at = [i for i, s in enumerate(stretches) if ("call", timed) in s]
    doubled = [["clock reading"] for i in timed_at for j in (i - 1, i + 1)
               if 0 <= j < len(stretches) and not stretches[j]]
    return [stretches[i] for i in timed_at] + doubled


def _harness_in(stretch: list[tuple[str, Any]], timed: CodeType) -> list[str]:
    """What ran inside a sample besides one call into the loop and the timed calls."""
    if stretch == ["clock reading"]:
        return ["a second clock reading beside the sample's own"]
    loops = [e for e in stretch if e[0] == "call" and e[1] is not timed]
    extra = [f"{kind} {getattr(what, 'co_name', what)}" for kind, what in loops[1:]]
    extra += [f"c_call {what}" for kind, what in stretch if kind == "c_call"]
    if not loops or stretch[0] != loops[0]:
        extra.append("no single call into the loop before the timed calls")
    return extra


def no_arguments() -> float:
    x = 1.0
    return x * 1.000001


@pytest.mark.parametrize("fn, args, kwargs", [
    (no_arguments, (), {}), (unit, (2.0,), {}), (unit, (2.0,), {"offset": 1.0})],
    ids=["no-arguments", "positional", "keyword"])
def test_nothing_but_the_timed_calls_runs_inside_a_sample(fn: Any, args: tuple, kwargs: dict
                                                          ) -> None:
    # Samples of 1 ms: even a loaded machine repeats a call of ~1 us (profiled) in each.
    config = TimingConfig(min_samples=5, max_samples=20, max_time=0.05, warmup=2,
                          min_sample_time=1e-3)
    timing: list[Any] = []
    events = _events_of(lambda: timing.append(
        measure(fn, args, kwargs, clock=CpuClock(), config=config)))
    stretches = _timed_stretches(events, fn.__code__)
    # The warm-up's samples, the calls-per-sample choice and the samples: each ran the call.
    assert len(stretches) >= config.warmup + timing[0].n, len(stretches)
    assert timing[0].inner > 1  # a call this short is repeated inside a sample
    assert max(s.count(("call", fn.__code__)) for s in stretches) == timing[0].inner
    # Every stretch: a clock reading beside a sample's own shows up as one more stretch.
    for stretch in stretches:
        assert _harness_in(stretch, fn.__code__) == [], stretch


def test_the_check_sees_a_harness_call_put_back_inside_a_sample() -> None:
    """The check above fails on the harness before issue 23: a closure around the call, called
    once per timed call."""
    def closure_per_call() -> float:
        return unit(2.0)

    events = _events_of(lambda: CpuClock(overhead_ns=0).run(closure_per_call, count=2, inner=3))
    broken = [_harness_in(s, unit.__code__) for s in _timed_stretches(events, unit.__code__)]
    assert len(broken) == 2 and all(b.count("call closure_per_call") == 3 for b in broken), \
        broken


def test_the_accuracy_tools_in_process_mode_times_each_call_with_all_three(
        tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    """tools/timing_accuracy.py --in-process: one pytest process whose test times each call with
    hpml.time, torch.utils.benchmark and timeit by turns (what the README's before/after table
    of the allocating add came from)."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "tools"))
    import timing_accuracy

    seconds = timing_accuracy.run(tmp_path, trials=1, keys=["add-1M"], log=lambda _: None,
                                  in_process=1)
    for tool in timing_accuracy.TOOLS:
        assert 1e-5 < seconds[tool]["add-1M"][0] < 0.1, seconds
