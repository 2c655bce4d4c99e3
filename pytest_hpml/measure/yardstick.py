"""A yardstick for CPU timings: the machine's own speed, measured between the samples.

On a shared machine the speed of the same code drifts with what the neighbours do: measured
here, a 2-million-element torch.add had medians 10 to 25 % apart between processes a minute
apart, whatever each process did, and a memory copy timed between its samples drifted with it
(the add's median over the copy's varied by 3 %). So every CPU timing also times a fixed
reference, a 16 MiB memcpy in one thread, between chunks of its samples (about a fifth of the
sampling time), and a comparison judges the timing relative to it: a slower machine moves both,
slower code moves only the timing. The raw figures are shown as measured; the verdict and its
basis say when they rest on the yardstick. GPU timings (CUDA events) need none.

A memory copy does not see every slowdown of the machine: measured here on another day, a
shared core ran compute-bound calls at two speeds by turns, for a few hundred milliseconds
each (torch.rand of 2M floats 8.0 or 14.5 ms, a Python loop 0.60 or 1.07 ms) while the memcpy
and a torch add kept their pace (2.0 ms, 1.2 ms). So a compute-bound reference, a fixed Python
loop, is timed beside each copy, and each chunk of samples is paced by the loop timed right
after it: the machine's compute pace during the timing (Metric.compute_yardstick). A
comparison holds back a verdict that the machine's own move explains (compare/machine_moves.py),
and judges a time relative to its pace where the history shows the pace tracks it
(compare/verdicts.py).
"""

from __future__ import annotations

import ctypes
import math
import statistics
import time
from collections.abc import Callable
from functools import cache
from typing import Any

from pytest_hpml.measure.stats import float_stdev

#: Bytes copied per yardstick run: beyond the CPU's caches, a few milliseconds.
NBYTES = 16 * 2**20
#: Samples between yardstick runs are chosen so the yardstick takes about 1 / (1 + RATIO)
#: of the sampling time.
RATIO = 4.0
#: Fewest yardstick runs a timing needs for a median to normalize by.
MIN_RUNS = 3
#: The samples move with the compute pace where pacing them narrows their spread to at most
#: this share of the spread as measured (tracking.TRACKING_RATIO, within one run) ...
PACE_TRACKING_RATIO = 0.7
#: ... and the spread as measured is at least this (in logs): a run at one pace shows nothing.
PACE_MIN_SPREAD = 0.05
#: Iterations of the compute-bound reference: about half a millisecond of interpreter work.
COMPUTE_STEPS = 20_000


def compute_pace(steps: int = COMPUTE_STEPS,
                 now_ns: Callable[[], int] = time.perf_counter_ns) -> float:
    """Seconds a fixed loop of integer additions in the interpreter took: compute-bound, in
    one thread, with no memory traffic beyond the caches."""
    start = now_ns()
    total = 0
    for step in range(steps):
        total += step
    return (now_ns() - start) / 1e9


class Yardstick:
    """A single-threaded memcpy between two buffers allocated once per process."""

    def __init__(self, nbytes: int = NBYTES,
                 now_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self.nbytes = nbytes
        self._src = (ctypes.c_char * nbytes)()
        self._dst = (ctypes.c_char * nbytes)()
        ctypes.memset(self._src, 1, nbytes)  # touch every page now, not in the first run
        ctypes.memset(self._dst, 0, nbytes)
        self._now_ns = now_ns

    def run(self) -> float:
        """Seconds one copy took."""
        start = self._now_ns()
        ctypes.memmove(self._dst, self._src, self.nbytes)
        return (self._now_ns() - start) / 1e9


@cache
def shared() -> Yardstick:
    return Yardstick()


class YardstickClock:
    """A CPU clock with the yardstick run between chunks of its samples."""

    def __init__(self, clock: Any, yardstick: Any | None = None,
                 pace: Callable[[], float] = compute_pace) -> None:
        self._clock = clock
        self._yardstick = yardstick or shared()
        self._pace = pace
        self.device = clock.device
        self.runs: list[float] = []  # seconds of each yardstick run
        self.compute_runs: list[float] = []  # seconds of the compute-bound reference, beside
        # Each timed sample, and the same over the compute pace timed right after its chunk.
        self._timed: list[float] = []
        self._paced: list[float] = []
        self._sample_seconds: float | None = None  # one sample's duration, last seen
        self._pace_of: tuple[tuple[int, int], tuple[float | None, bool]] = ((-1, -1),
                                                                            (None, False))

    def _chunk(self, left: int) -> int:
        if self._sample_seconds is None or not self.runs:
            return 1
        reference = statistics.median(self.runs) + (
            statistics.median(self.compute_runs) if self.compute_runs else 0.0)
        per_yardstick = RATIO * reference / max(self._sample_seconds, 1e-9)
        return max(1, min(left, math.ceil(per_yardstick)))

    def run(self, fn: Callable[[], Any], count: int, inner: int, *,
            time_left: float | None = None, warmup: bool = False) -> list[float]:
        out: list[float] = []
        while len(out) < count:
            part = self._clock.run(fn, self._chunk(count - len(out)), inner, time_left=time_left,
                                   warmup=warmup)
            out += part
            self._sample_seconds = part[-1] * inner
            self.runs.append(self._yardstick.run())
            pace = self._pace()
            self.compute_runs.append(pace)
            if not warmup and pace > 0:
                self._timed += part
                self._paced += [sample / pace for sample in part]
        return out

    @property
    def yardstick_seconds(self) -> float | None:
        """The yardstick's median in seconds, once it ran often enough to have one."""
        return statistics.median(self.runs) if len(self.runs) >= MIN_RUNS else None

    def _pace_figures(self) -> tuple[float | None, bool]:
        """(compute_seconds, tracks_pace) for the samples taken so far, worked out once per
        count of samples: the timing and the metric it stamps both read them."""
        seen = (len(self._timed), len(self.compute_runs))
        if self._pace_of[0] != seen:
            self._pace_of = (seen, (self._compute_seconds(), self._tracks_pace()))
        return self._pace_of[1]

    @property
    def compute_seconds(self) -> float | None:
        """The machine's compute pace during the timing (_compute_seconds)."""
        return self._pace_figures()[0]

    @property
    def tracks_pace(self) -> bool:
        """Whether the samples moved with the compute pace (_tracks_pace)."""
        return self._pace_figures()[1]

    def _compute_seconds(self) -> float | None:
        """The machine's compute pace during the timing, in seconds of the reference loop: the
        samples' median over their median paced chunk by chunk (each sample over the loop
        timed right after it), so that a run which caught slow stretches for some of its
        samples is paced stretch by stretch, not by a median of the two speeds; None until
        the loop ran MIN_RUNS times."""
        if len(self.compute_runs) < MIN_RUNS or not self._paced:
            return None
        paced = statistics.median(self._paced)
        return statistics.median(self._timed) / paced if paced > 0 else None

    def _tracks_pace(self) -> bool:
        """Whether the samples moved with the compute pace within this run: pacing them by the
        loop timed next to them narrows their spread (a compute-bound call in a run that
        caught slow stretches). A memory-bound call keeps its speed while the loop slows, and a
        run at one pace shows nothing: neither may have its verdict explained by the pace."""
        if len(self._timed) < MIN_RUNS:
            return False
        raw = float_stdev([math.log(v) for v in self._timed if v > 0], population=True)
        paced = float_stdev([math.log(v) for v in self._paced if v > 0], population=True)
        return raw >= PACE_MIN_SPREAD and paced <= PACE_TRACKING_RATIO * raw

    def warnings(self) -> list[str]:
        inner = getattr(self._clock, "warnings", None)
        return inner() if inner else []


def stamp(metric: Any, clock: Any) -> None:
    """What a timing on `clock` says of the machine, on the metric it recorded: the yardstick's
    median, the compute pace and whether the samples moved with it (None on a clock without a
    yardstick: a GPU's, or --hpml-yardstick=off)."""
    metric.yardstick = getattr(clock, "yardstick_seconds", None)
    metric.compute_yardstick = getattr(clock, "compute_seconds", None)
    metric.pace_tracked = getattr(clock, "tracks_pace", False) or None
