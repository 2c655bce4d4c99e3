"""The lab's instruments, each read where a rank trains: clocks for the inside of a step, a DDP
comm hook that times every gradient bucket's all-reduce, and a counter of the bytes every
collective sends. Written against torch and torch.distributed only.

Clocks. A step's pieces (the step itself, each gradient bucket's all-reduce) are stamped with
``mark()`` while the step runs and turned into seconds only after the epoch, so that a GPU step
is never synchronized just to be timed. On a CPU a mark is ``perf_counter``; on a GPU it is a
CUDA event recorded on the current stream, so it reads when the GPU reached that point, not when
Python did.

The comm hook all-reduces each bucket as DDP's default hook does and times it: the all-reduce
itself, measured, instead of inferred from the data loader. DDP hands a bucket to the hook as
soon as all its gradients exist, during backward, so the all-reduces overlap the gradients still
being computed. The hook stamps each bucket when it is handed over (on a GPU: a CUDA event on the
backward stream, i.e. when its gradients are done) and when its reduced values are ready (the
future's callback; on a GPU the callback's stream waits for the all-reduce). A bucket's interval
therefore includes the time it waited behind the previous bucket; the step's communication time
is the union of its buckets' intervals (``covered``), the time during which some all-reduce was
in flight.

    timer = AllReduceTimer(clock, world_size)
    ddp.register_comm_hook(timer, timed_allreduce_hook)
    timer.begin_step(); ...backward...; buckets = timer.end_step()

What goes over the wire: the bytes of every collective torch.distributed is asked to run, counted
by wrapping its functions for the duration of a block, by phase. DDP (and SyncBatchNorm, and the
comm hook) call the collectives through the ``torch.distributed`` module at call time, so a
wrapper installed there sees:

    _broadcast_coalesced   parameters and buffers from rank 0 at construction; buffers (BatchNorm
                           running statistics) before every forward when broadcast_buffers is on
    all_reduce             the gradient buckets (from the comm hook); SyncBatchNorm's backward
    all_gather*            SyncBatchNorm's forward (per-rank mean, inverse std and count)

A collective's size is its payload as nccl-tests counts it: the tensor all-reduced or broadcast,
the gathered output of an all-gather. What C++ issues on its own (DDP checking at construction
that every rank has the same parameter shapes) is not seen, and is metadata, not training data.
"""

# No `from __future__ import annotations` here: DDP checks the comm hook's annotations as objects
# (dist.GradBucket, torch.futures.Future[torch.Tensor]) and refuses them as strings.
import contextlib
import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

import pytest_hpml

# -- clocks ---------------------------------------------------------------------------------------

class HostClock:
    """Marks are perf_counter readings: what a CPU rank (gloo) does is done when Python is.
    ``now`` is a parameter only so that the arithmetic can be tested with a fake time."""

    def __init__(self, now: Callable[[], float] = time.perf_counter) -> None:
        self._now = now

    def mark(self) -> float:
        return self._now()

    def seconds(self, start: Any, end: Any) -> float:
        return end - start

    def calibrate(self) -> None:
        """Nothing to learn: the host clock holds nothing back (see ``hold``)."""

    def hold(self, seconds: float) -> None:
        """Nothing to cover: a host mark is read when Python reaches it, not when a device
        does."""

    def synchronize(self) -> None:
        pass


class CudaEventClock:
    """Marks are CUDA events recorded on the current stream; ``seconds`` is valid once the
    events have completed (after ``synchronize``). ``hold`` queues the plugin's GPU busy-wait
    (pytest_hpml.gpu_busy_wait: torch.cuda._sleep at a rate measured once per device) ahead of a
    mark. ``event``, ``synchronize`` and ``busy_wait`` are parameters only so that the
    arithmetic can be tested on a machine without a GPU."""

    def __init__(self, device: torch.device | None = None,
                 event: Callable[..., Any] | None = None,
                 synchronize: Callable[[], None] | None = None,
                 busy_wait: Callable[[float], Any] | None = None) -> None:
        self._device = device
        self._event = event or (lambda: torch.cuda.Event(enable_timing=True))
        self._synchronize = synchronize or (lambda: torch.cuda.synchronize(device))
        self._busy_wait = busy_wait

    def mark(self) -> Any:
        event = self._event()
        event.record()
        return event

    def seconds(self, start: Any, end: Any) -> float:
        return start.elapsed_time(end) / 1e3  # CUDA events measure milliseconds

    def calibrate(self) -> None:
        """Have the busy-wait ready: its rate is measured once per device, which takes a
        synchronize, so a rank calls this before the ranks line up for a timed loop."""
        if self._busy_wait is None:
            self._busy_wait = pytest_hpml.gpu_busy_wait(self._device or "cuda")

    def hold(self, seconds: float) -> None:
        """Queue about ``seconds`` of GPU busy-wait on the current stream: the next mark is
        then stamped when the busy-wait ends, with the work after it already queued, instead
        of at once on an idle GPU while the host is still queueing that work."""
        if seconds <= 0:
            return
        self.calibrate()
        assert self._busy_wait is not None
        self._busy_wait(seconds)

    def synchronize(self) -> None:
        self._synchronize()


def clock_for(device: torch.device) -> HostClock | CudaEventClock:
    return CudaEventClock(device) if device.type == "cuda" else HostClock()


#: Host seconds to queue one call, assumed at the least (torch's NCCL path from Python takes
#: tens of microseconds): a loop measured on a quiet host does not shrink the next busy-wait
#: below what a slower moment of the host may need.
LEAST_QUEUE_ESTIMATE = 100e-6
#: Busy-wait per second of expected queueing: a margin for the host's jitter.
HOLD_MARGIN = 1.5
#: The longest busy-wait queued ahead of a timed loop: an estimate is not trusted without bound.
MAX_HOLD = 0.05


def time_back_to_back(call: Callable[[], Any], iterations: int,
                      clock: HostClock | CudaEventClock,
                      queue_estimate: float = 0.0,
                      now: Callable[[], float] = time.perf_counter) -> tuple[float, float]:
    """Seconds per call of ``iterations`` back-to-back calls between two marks of ``clock``, and
    the host's seconds per call to queue them (the next loop's ``queue_estimate``; never taken
    below LEAST_QUEUE_ESTIMATE).

    On a GPU the start mark would be stamped at once on an idle GPU, and the loop would then
    time the host queueing the calls (for a small all_reduce, longer than the collective) as
    much as the calls. A busy-wait covering the expected queueing goes ahead of the start mark,
    so that the mark is stamped when the GPU starts the first call with the others queued
    behind it, as nvbench's blocking kernel does.
    """
    expected = iterations * max(queue_estimate, LEAST_QUEUE_ESTIMATE)
    clock.hold(min(MAX_HOLD, HOLD_MARGIN * expected))
    queued = now()
    start = clock.mark()
    for _ in range(iterations):
        call()
    end = clock.mark()
    queueing = (now() - queued) / iterations
    clock.synchronize()
    return clock.seconds(start, end) / iterations, queueing


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


# -- the comm hook: each gradient bucket's all-reduce, timed --------------------------------------

@dataclass
class BucketRecord:
    index: int  # DDP's bucket index (buckets are rebuilt after the first step)
    nbytes: int  # the flattened gradients all-reduced: numel x element size
    start: Any  # clock marks until resolved, then seconds from the step's start
    end: Any


class AllReduceTimer:
    """The hook's state: the buckets of the current step, in the order they finished; the
    process group they are all-reduced in (None: the default group)."""

    def __init__(self, clock: Any, world_size: int, group: Any = None) -> None:
        self.clock = clock
        self.world_size = world_size
        self.group = group
        self._lock = threading.Lock()  # gloo runs callbacks on its own threads
        self._buckets: list[BucketRecord] = []

    def begin_step(self) -> None:
        with self._lock:
            self._buckets = []

    def add(self, record: BucketRecord) -> None:
        with self._lock:
            self._buckets.append(record)

    def end_step(self) -> list[BucketRecord]:
        """This step's buckets (marks, not yet seconds). Call after backward returned: DDP
        waits for every bucket's future before backward ends."""
        with self._lock:
            buckets, self._buckets = self._buckets, []
        return buckets


def timed_allreduce_hook(state: AllReduceTimer,
                         bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (average over ranks), with the bucket's interval recorded."""
    buffer = bucket.buffer()
    # Averaging before the sum, as DDP's default hook does (keeps fp16 sums in range).
    buffer.div_(state.world_size)
    start = state.clock.mark()
    future = dist.all_reduce(buffer, group=state.group, async_op=True).get_future()
    index, nbytes = bucket.index(), buffer.numel() * buffer.element_size()

    def reduced(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        state.add(BucketRecord(index, nbytes, start, state.clock.mark()))
        return fut.value()[0]

    return future.then(reduced)


# -- the wire: bytes of every collective, by phase ------------------------------------------------

def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _tensors_bytes(tensors: Any) -> int:
    return sum(_nbytes(t) for t in tensors)


#: collective -> payload bytes, from its call's arguments (positional or by keyword).
PAYLOAD: dict[str, Callable[..., int]] = {
    "all_reduce": lambda tensor, *a, **k: _nbytes(tensor),
    "broadcast": lambda tensor, *a, **k: _nbytes(tensor),
    "all_gather": lambda tensor_list, tensor, *a, **k: _tensors_bytes(tensor_list),
    "all_gather_into_tensor": lambda output_tensor, *a, **k: _nbytes(output_tensor),
    "all_gather_single": lambda output_tensor, *a, **k: _nbytes(output_tensor),
    "reduce_scatter_tensor": lambda output, input, *a, **k: _nbytes(input),
    "_broadcast_coalesced": lambda process_group, tensors, *a, **k: _tensors_bytes(tensors),
}


class WireCounter:
    """Bytes and calls per (phase, collective). Set ``phase`` as the run moves on
    ("construction", "step", "evaluation" ...); only calls inside ``installed()`` count."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.bytes: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()

    def count(self, collective: str, nbytes: int) -> None:
        self.bytes[(self.phase, collective)] += nbytes
        self.calls[(self.phase, collective)] += 1

    def phase_bytes(self, phase: str) -> dict[str, int]:
        return {c: n for (p, c), n in self.bytes.items() if p == phase}

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        payload = PAYLOAD[name]

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count(name, payload(*args, **kwargs))
            return original(*args, **kwargs)

        return counted

    @contextlib.contextmanager
    def installed(self) -> Iterator["WireCounter"]:
        originals = {name: getattr(dist, name) for name in PAYLOAD if hasattr(dist, name)}
        try:
            for name, original in originals.items():
                setattr(dist, name, self._wrap(name, original))
            yield self
        finally:
            for name, original in originals.items():
                setattr(dist, name, original)
