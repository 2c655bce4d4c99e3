"""Device-aware clocks: each runs a batch of samples of a call and returns seconds per call.

The host's wall clock for CPU work (and whole programs that end synchronized with a GPU); CUDA
events for GPU work, with one synchronize per batch, a GPU busy-wait queued ahead of each batch
and the SM clock read while the batch runs, to measure throttled batches again while the time
cap allows. Every clock is built here (`clock_for`); the CUDA clock takes its event API as
arguments so its logic runs on a CPU with fakes.
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
        out = []
        collecting = gc.isenabled()
        gc.disable()
        try:
            for _ in range(count):
                call.result = None  # the previous result is freed outside the sample
                start = now()
                result = loop(inner, *arguments)
                end = now()
                call.result = result
                out.append(max(end - start - overhead, 0.0) / 1e9 / inner)
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
        # () -> (current, default) SM clock, None when it cannot be read (gpus.SmClock)
        self._sm_clock = sm_clock
        self._host_per_sample = self.FIRST_HOST_ESTIMATE
        self.device = device
        self.flushes_l2 = flush_l2 is not None
        self.throttled = 0  # samples measured while the clock was throttled
        self.kept_throttled = 0  # ... and kept: the time cap ran out before a clean batch
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
            samples, throttled = self._run_batch(fn, part, inner, check=not warmup)
            if throttled:
                self.throttled += len(samples)
                if self._now() < until:
                    continue
                self.kept_throttled += len(samples)
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
        return said

    def _run_batch(self, fn: Callable[[], Any], count: int, inner: int,
                   check: bool = True) -> tuple[list[float], bool]:
        """The batch's samples, and whether the SM clock was throttled while it ran (not
        read unless `check`)."""
        if self._busy_wait is not None:
            # Keep the GPU busy while the host queues the whole batch (as nvbench's blocking
            # kernel does): otherwise an idle GPU stamps the start event at once and a short
            # kernel's sample measures the host's launch path instead of the kernel.
            self._busy_wait(min(self.MAX_BUSY_WAIT,
                                self.BUSY_WAIT_MARGIN * count * self._host_per_sample))
        queued = self._now()
        pairs = []
        for _ in range(count):
            if self._flush_l2 is not None:
                # Queued before the start event, so the flush is not part of the sample.
                self._flush_l2()
            start, end = self._event(), self._event()
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            pairs.append((start, end))
        self._host_per_sample = max((self._now() - queued) / count, 1e-6)
        # Read while the GPU works through the batch: after the synchronize it is going idle.
        throttled = self._throttled() if check else False
        # One host synchronization for the batch: syncing per sample would add launch gaps.
        self._synchronize()
        return [start.elapsed_time(end) / 1e3 / inner for start, end in pairs], throttled


def calibrate_cycles_per_second(event_factory: Callable[[], Any], synchronize: Callable[[], None],
                                spin: Callable[[int], Any], cycles: int = 10_000_000) -> float:
    """GPU cycles per second of the spin kernel (torch.cuda._sleep), timed with events.

    torch does not expose the SM clock in its device properties (and CUDA 13 dropped
    clockRate), and the clock under load differs from the nominal one: measuring the spin
    itself gives the rate the busy-wait actually runs at.
    """
    spin(cycles // 10)  # load the kernel before it is timed
    start, end = event_factory(), event_factory()
    start.record()
    spin(cycles)
    end.record()
    synchronize()
    seconds = start.elapsed_time(end) / 1e3
    if not seconds > 0:
        raise RuntimeError("the GPU spin kernel took no measurable time; cannot calibrate")
    return cycles / seconds


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

    from pytest_hpml.machine.gpus import sm_clock

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


@cache
def gpu_busy_wait(device: Any = "cuda") -> Callable[[float], None]:  # pragma: no cover - GPU
    """A function that queues about `seconds` of GPU spinning on the current stream of
    `device` (torch.cuda._sleep, its cycles per second measured once per device with events),
    so that work queued behind it starts on a busy GPU: an event recorded after the spin is
    stamped when the GPU gets to it, not when the host queued it. Never run here (no GPU)."""
    import torch

    device = torch.device(device)
    with torch.cuda.device(device):
        rate = calibrate_cycles_per_second(lambda: torch.cuda.Event(enable_timing=True),
                                           lambda: torch.cuda.synchronize(device),
                                           torch.cuda._sleep)
    return lambda seconds: torch.cuda._sleep(int(seconds * rate))
