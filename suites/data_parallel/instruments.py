"""Clocks for the inside of a training step, and the time several intervals cover together.

A step's pieces (the step itself, each gradient bucket's all-reduce) are stamped with ``mark()``
while the step runs and turned into seconds only after the epoch, so that a GPU step is never
synchronized just to be timed. On a CPU a mark is ``perf_counter``; on a GPU it is a CUDA event
recorded on the current stream, so it reads when the GPU reached that point, not when Python did.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import torch


class HostClock:
    """Marks are perf_counter readings: what a CPU rank (gloo) does is done when Python is."""

    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, start: Any, end: Any) -> float:
        return end - start

    def synchronize(self) -> None:
        pass


class CudaEventClock:
    """Marks are CUDA events recorded on the current stream; ``seconds`` is valid once the
    events have completed (after ``synchronize``). ``event`` and ``synchronize`` are parameters
    only so that the arithmetic can be tested on a machine without a GPU."""

    def __init__(self, device: torch.device | None = None,
                 event: Callable[..., Any] | None = None,
                 synchronize: Callable[[], None] | None = None) -> None:
        self._event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self._synchronize = synchronize or (lambda: torch.cuda.synchronize(device))

    def mark(self) -> Any:
        event = self._event()
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # CUDA events measure milliseconds

    def synchronize(self) -> None:
        self._synchronize()


def clock_for(device: torch.device) -> HostClock | CudaEventClock:
    return CudaEventClock(device) if device.type == "cuda" else HostClock()


def covered(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of [start, end) intervals.

    A step's buckets are all-reduced one after another but their intervals overlap when a bucket
    is ready before the previous one is reduced (it waits in the queue): adding the durations
    would count that wait twice. The union is the time some all-reduce was in flight.
    """
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total
