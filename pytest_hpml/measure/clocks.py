"""Device-aware clocks: each runs a batch of samples of a call and returns seconds per call.

The host's wall clock for CPU work (and whole programs that end synchronized with a GPU); CUDA
events for GPU work, with one synchronize per batch, a GPU busy-wait queued ahead of each batch
(pytest_hpml.measure.busy_wait) and the SM clock read while the batch runs, to measure again,
while the time cap allows, the batches that ran throttled or that the host was still queueing
when their busy-wait ended. Every clock is built here (`clock_for`); the CUDA clock takes its
event API as arguments so its logic runs on a CPU with fakes.
"""

from __future__ import annotations

import gc
import keyword
import statistics
import time
from collections.abc import Callable
from functools import cache
from itertools import repeat
from typing import Any, Literal, Protocol

ClockKind = Literal["device", "host"]


class Clock(Protocol):
    """Runs `count` samples of `inner` calls each and returns seconds per call per sample;
    `time_left`: seconds of the measurement's time cap still to spend (a clock that measures
    some batches again spends no more); `warmup`: the calls warm up (compilation, caches, an
    idle GPU's clocks), so nothing about them is checked or said."""

    device: str

    def run(self, fn: Callable[[], Any], count: int, inner: int, *,
            time_left: float | None = None, warmup: bool = False) -> list[float]: ...


@cache
def _loop_of(positional: int, keywords: tuple[str, ...]) -> Callable[..., Any]:
    """A function that calls fn(a0, ..., name=k0, ...) n times and returns the last result,
    compiled for this shape of arguments as timeit compiles its statement: a sample then costs
    n calls of fn and n iterations of a C-level loop, and nothing of the harness's own (no
    closure, no argument tuple unpacked per call). The first n - 1 results are dropped at once,
    as a statement's are, so the allocator sees what it sees in timeit."""
    names = [f"_a{i}" for i in range(positional)] + [f"_k{i}" for i in range(len(keywords))]
    arguments = [f"_a{i}" for i in range(positional)] + [
        f"{name}=_k{i}" for i, name in enumerate(keywords)]
    call = f"_fn({', '.join(arguments)})"
    source = (f"def loop(_n, _fn{''.join(', ' + n for n in names)}):\n"
              f"    for _ in _repeat(None, _n - 1):\n"
              f"        {call}\n"
              f"    return {call}\n")
    namespace: dict[str, Any] = {"_repeat": repeat}
    exec(compile(source, "<pytest-hpml timed call>", "exec"), namespace)  # noqa: S102
    return namespace["loop"]


def _generic_loop(n: int, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """The loop for keyword names that cannot be written in source (not identifiers)."""
    for _ in repeat(None, n - 1):
        fn(*args, **kwargs)
    return fn(*args, **kwargs)


class Call:
    """fn(*args, **kwargs), the statement a timing times; `result` holds its last result.

    Calling it runs fn once (the CUDA clock, warm-up); `loop()` gives the compiled loop the
    CPU clock runs a sample with."""

    def __init__(self, fn: Callable[..., Any], args: tuple = (), kwargs: dict | None = None
                 ) -> None:
        self.fn = fn
        self.args = tuple(args)
        self.kwargs = dict(kwargs or {})
        self.result: Any = None

    def __call__(self) -> Any:
        self.result = self.fn(*self.args, **self.kwargs)
        return self.result

    def loop(self) -> tuple[Callable[..., Any], tuple]:
        """(loop, its arguments after n): loop(n, *arguments) makes n calls, returns the last
        result."""
        names = tuple(self.kwargs)
        if all(n.isidentifier() and not keyword.iskeyword(n) for n in names) \
                and len(self.args) + len(names) < 200:
            return _loop_of(len(self.args), names), (self.fn, *self.args,
                                                     *self.kwargs.values())
        return _generic_loop, (self.fn, self.args, self.kwargs)


def as_call(fn: Callable[[], Any]) -> Call:
    return fn if isinstance(fn, Call) else Call(fn)


def clock_read_cost(now_ns: Callable[[], int], reads: int = 201) -> float:
    """Nanoseconds a sample's two clock readings add to it: the median gap between two
    back-to-back readings (the time from the first reading's sample point to its return, plus
    the second's up to its sample point, is one reading's cost)."""
    gaps = []
    for _ in range(reads):
        first = now_ns()
        gaps.append(now_ns() - first)
    return float(statistics.median(gaps))


class CpuClock:
    """The host's wall clock: CPU work, and whole programs that end synchronized with a GPU.

    A sample is `inner` calls in the compiled loop of `Call`, between two readings of the
    clock; the readings' own cost (measured once per clock) is taken out of it, and the
    sampler picks `inner` so that what remains of the harness (one call into the loop) is a
    small share of a sample. The garbage collector is paused during a batch, as timeit pauses
    it: a collection that some other code's garbage triggers is not the timed call's cost.
    """

    device = "cpu"

    def __init__(self, now_ns: Callable[[], int] = time.perf_counter_ns,
                 overhead_ns: float | None = None) -> None:
        self._now_ns = now_ns
        #: What two readings of the clock add to a sample, in ns (None: measure it first).
        self.overhead_ns = overhead_ns

    def run(self, fn: Callable[[], Any], count: int, inner: int, *,
            time_left: float | None = None, warmup: bool = False) -> list[float]:
        call = as_call(fn)
        now = self._now_ns
        if self.overhead_ns is None:
            self.overhead_ns = clock_read_cost(now)
        overhead = self.overhead_ns
        loop, arguments = call.loop()
        # Allocated before the batch: a list growing between samples takes memory from the
        # heap beside the block a call's output was freed from, and the next output goes
        # elsewhere (see below).
        out = [0.0] * count
        collecting = gc.isenabled()
        gc.disable()
        try:
            result = None
            for i in range(count):
                # The previous result is freed outside the sample, by both its references. Kept
                # alive by this loop while the next call allocated, a 1M-element torch add's
                # 4 MB outputs took three blocks by turns where timeit's loop takes one or two,
                # the caches held less of them, and the add read 20-60 % above timeit in the
                # same process (2026-11-27, this machine).
                call.result = result = None
                start = now()
                result = loop(inner, *arguments)
                end = now()
                call.result = result
                out[i] = max(end - start - overhead, 0.0) / 1e9 / inner
        finally:
            if collecting:
                gc.enable()
        return out


class CudaClock:
    """CUDA events around each sample and one synchronize per batch.

    The event API is injected so that this logic runs on CPU in tests with a fake; the real
    one is torch.cuda.Event(enable_timing=True) and torch.cuda.synchronize (see clock_for).
    """

    #: Host time per sample assumed before one has been measured (a launch and two events).
    FIRST_HOST_ESTIMATE = 50e-6
    #: Longest GPU busy-wait queued ahead of a batch: a batch that takes the host longer to
    #: queue is split, each part behind its own busy-wait, so no sample starts on an idle GPU.
    MAX_BUSY_WAIT = 0.05
    #: Busy-wait per second of expected queueing: a margin for host jitter.
    BUSY_WAIT_MARGIN = 1.5
    #: A batch measured while the SM clock was below this share of the GPU's default clock was
    #: throttled (power or thermal limits): its samples describe the cooling, not the kernel.
    #: nvbench's default threshold, against the same clock: sustained tensor-core work runs
    #: below the maximum clock (1.6-1.8 GHz of an H100 SXM's 1.98) and is not throttled.
    THROTTLE_RATIO = 0.75

    def __init__(
        self,
        event_factory: Callable[[], Any],
        synchronize: Callable[[], None],
        flush_l2: Callable[[], Any] | None = None,
        device: str = "cuda",
        busy_wait: Callable[[float], Any] | None = None,
        now: Callable[[], float] = time.perf_counter,
        sm_clock: Callable[[], tuple[float, float] | None] | None = None,
    ) -> None:
        self._event = event_factory
        self._synchronize = synchronize
        self._flush_l2 = flush_l2
        self._busy_wait = busy_wait
        self._now = now
        # () -> (current, default) SM clock, None when it cannot be read (nvml.SmClock)
        self._sm_clock = sm_clock
        self._host_per_sample = self.FIRST_HOST_ESTIMATE
        self.device = device
        self.flushes_l2 = flush_l2 is not None
        self.throttled = 0  # samples measured while the clock was throttled
        self.kept_throttled = 0  # ... and kept: the time cap ran out before a clean batch
        self.uncovered = 0  # samples queued after their busy-wait had ended
        self.kept_uncovered = 0  # ... and kept
        self.host_bound = 0  # ... after the longest busy-wait had ended: kept at once
        self.clocks: list[float] = []  # SM clock while each batch ran
        self._problems: list[str] = []

    def run(self, fn: Callable[[], Any], count: int, inner: int, *,
            time_left: float | None = None, warmup: bool = False) -> list[float]:
        """Batches measured while the SM clock was throttled are measured again while
        `time_left` allows (none without it); past it they are kept, and said so. Warm-up
        batches are not checked: a timing that starts on an idle GPU reads its idle clock
        during the warm-up, which is what the warm-up is for."""
        out: list[float] = []
        until = self._now() + (time_left or 0.0)
        while len(out) < count:
            part = count - len(out)
            if self._busy_wait is not None:
                fits = int(self.MAX_BUSY_WAIT / (self.BUSY_WAIT_MARGIN * self._host_per_sample))
                part = max(1, min(part, fits))
            samples, throttled, uncovered = self._run_batch(fn, part, inner, check=not warmup)
            if throttled or uncovered:
                self.throttled += len(samples) if throttled else 0
                self.uncovered += len(samples) if uncovered else 0
                if self._now() < until:
                    continue
                self.kept_throttled += len(samples) if throttled else 0
                self.kept_uncovered += len(samples) if uncovered else 0
            out.extend(samples)
        return out

    def _throttled(self) -> bool:
        """Whether the SM clock, read now (while the batch runs), is throttled."""
        reading = self._sm_clock() if self._sm_clock is not None else None
        problem = getattr(self._sm_clock, "take_problem", lambda: None)()
        if problem:
            self._problems.append(f"throttling not checked: {problem}")
        if reading is None:
            return False
        current, default = reading
        self.clocks.append(current)
        return default > 0 and current < self.THROTTLE_RATIO * default

    def warnings(self) -> list[str]:
        said = list(self._problems)
        measured_again = self.throttled - self.kept_throttled
        limit = f"below {self.THROTTLE_RATIO:.0%} of its default clock (throttled)"
        if measured_again:
            said.append(f"{measured_again} sample(s) taken while the SM clock was {limit} "
                        "were measured again")
        if self.kept_throttled:
            said.append(f"{self.kept_throttled} sample(s) were taken while the SM clock was "
                        f"{limit} and kept: the time cap ran out first (power or thermal "
                        "limits: let the GPU cool, or check its power cap)")
        late = "queued after the GPU busy-wait ahead of their batch had ended (they may time " \
               "the host's launches, not the GPU's work)"
        if self.uncovered - self.kept_uncovered:
            said.append(f"{self.uncovered - self.kept_uncovered} sample(s) {late} were measured "
                        "again")
        if self.kept_uncovered:
            said.append(f"{self.kept_uncovered} sample(s) {late} were kept: the time cap ran "
                        "out first")
        if self.host_bound:
            said.append(f"{self.host_bound} sample(s) {late} were kept: the host took longer "
                        f"to queue them than the longest busy-wait ({self.MAX_BUSY_WAIT:g} s)")
        return said

    def _run_batch(self, fn: Callable[[], Any], count: int, inner: int,
                   check: bool = True) -> tuple[list[float], bool, bool]:
        """The batch's samples, whether the SM clock was throttled while it ran, and whether
        the host was still queueing it when its busy-wait ended (neither judged unless
        `check`)."""
        began = self._now()
        wait = None
        if self._busy_wait is not None:
            # Keep the GPU busy while the host queues the whole batch (as nvbench's blocking
            # kernel does): otherwise an idle GPU stamps the start event at once and a short
            # kernel's sample measures the host's launch path instead of the kernel. Events
            # around it say how long it lasted on the GPU.
            asked = min(self.MAX_BUSY_WAIT, self.BUSY_WAIT_MARGIN * count * self._host_per_sample)
            wait = (asked, self._event(), self._event())
            wait[1].record()
            self._busy_wait(asked)
            wait[2].record()
        pairs = []
        queued = []  # the host's clock once each sample's work and end event were queued
        for _ in range(count):
            if self._flush_l2 is not None:
                # Queued before the start event, so the flush is not part of the sample.
                self._flush_l2()
            start, end = self._event(), self._event()
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            queued.append(self._now())
            pairs.append((start, end))
        done = self._now()
        # The host's time per sample, the busy-wait's own launch included: what the next
        # batch's busy-wait must cover.
        self._host_per_sample = max((done - began) / count, 1e-6)
        # Read while the GPU works through the batch: after the synchronize it is going idle.
        throttled = self._throttled() if check else False
        # One host synchronization for the batch: syncing per sample would add launch gaps.
        self._synchronize()
        uncovered = False
        if wait is not None:
            asked, wait_start, wait_end = wait
            spanned = wait_start.elapsed_time(wait_end) / 1e3
            # Shorter than asked: the spin ran faster than calibrated, and its rate becomes
            # the one this spin measured.
            getattr(self._busy_wait, "observe", lambda *_: None)(asked, spanned)
            # The GPU began the busy-wait no earlier than `began`: a span shorter than the
            # host's queueing left the GPU idle before the last samples were queued. Measured
            # again where a longer busy-wait was possible; past the longest, said and kept.
            uncovered = check and spanned < done - began
            if uncovered and self._waited_in_the_queue(began, wait_start, pairs, queued):
                # The host took longer than the busy-wait because its launches blocked on a
                # full queue (a cold-L2 flush per sample): the GPU was busy all along.
                uncovered = False
            if uncovered and asked >= self.MAX_BUSY_WAIT:
                self.host_bound += count
                uncovered = False
        samples = [start.elapsed_time(end) / 1e3 / inner for start, end in pairs]
        return samples, throttled, uncovered


    def _waited_in_the_queue(self, began: float, wait_start: Any, pairs: list,
                             queued: list[float]) -> bool:
        """Whether the GPU began every sample only after the host had queued all of it (its
        work and its end event): then no sample waited for the host. The GPU began the
        busy-wait no earlier than `began`, so `began` plus the events' span from the
        busy-wait's start to a sample's start is the earliest it can have begun the sample."""
        return all(began + wait_start.elapsed_time(start) / 1e3 >= at
                   for (start, _), at in zip(pairs, queued, strict=True))


def clock_for(device: Any, kind: ClockKind = "device", cold_l2: bool = False) -> Clock:
    """The clock for work on `device`: CUDA events on a CUDA device (kind "device"), else the
    host's wall clock (CPU work, or a whole program that returns once the GPU is done)."""
    if kind not in ("device", "host"):
        raise ValueError(f"clock must be 'device' (CUDA events on a GPU) or 'host' (wall "
                         f"clock), not {kind!r}")
    if kind == "host" or getattr(device, "type", str(device)).split(":")[0] != "cuda":
        return CpuClock()
    return _cuda_clock(device, cold_l2)  # pragma: no cover - needs a GPU


def _cuda_clock(device: Any, cold_l2: bool) -> CudaClock:  # pragma: no cover - needs a GPU
    """The real CUDA clock. Never run on the development machine (no GPU there)."""
    import torch

    from pytest_hpml.machine.nvml import sm_clock
    from pytest_hpml.measure.busy_wait import gpu_busy_wait

    props = torch.cuda.get_device_properties(device)
    flush = None
    if cold_l2:
        l2 = getattr(props, "L2_cache_size", 64 * 2**20)
        scratch = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
        flush = scratch.zero_
    return CudaClock(
        event_factory=lambda: torch.cuda.Event(enable_timing=True),
        synchronize=lambda: torch.cuda.synchronize(device),
        flush_l2=flush,
        device=str(device),
        busy_wait=gpu_busy_wait(device),
        sm_clock=sm_clock(torch.device(device)),
    )
