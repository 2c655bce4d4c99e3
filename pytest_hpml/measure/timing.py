"""Device-aware clocks with warm-up and adaptive sampling.

Measuring is separate from presenting (as in torch.utils.benchmark): this module returns a
Timing; the fixture records it and the report renders it. Every clock is built here
(`clock_for`); the CUDA parts take their event API as arguments so the logic runs on a CPU
with fakes.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from pytest_hpml.measure.stats import Summary, noise_ratio, summarize

ClockKind = Literal["device", "host"]

#: The sampling time cap per profile: quick runs are smoke runs of the labs on a small CPU.
MAX_TIME = {"quick": 0.5, "full": 3.0}
#: The fewest samples a timing takes when the time cap forbids min_samples (a 5 s call in a
#: 0.5 s cap): enough for a median and an IQR, said in the timing's warnings.
MIN_SAMPLES_FLOOR = 3


@dataclass(frozen=True)
class TimingConfig:
    """Sampling policy, in the spirit of nvbench: enough samples, stop when the mean is tight.

    These defaults are the only ones: the command line and @pytest.mark.hpml override them.
    """

    min_samples: int = 10
    max_time: float = MAX_TIME["full"]  # seconds of sampling (after warm-up) before stopping
    target_rse: float = 0.005  # stop once stdev / sqrt(n) / mean falls below this
    warmup: int = 1  # calls before the first sample: JIT compilation, autotuning, caches
    cold_l2: bool = False  # CUDA: flush L2 before every sample, outside the timed region
    yardstick: bool = True  # CPU: time the machine's speed between samples (yardstick.py)
    min_sample_time: float = 20e-6  # CPU: repeat very short calls inside one sample
    max_samples: int = 100_000

    def __post_init__(self) -> None:
        for name in ("min_samples", "warmup", "max_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be an int, got {value!r}")
        for name in ("max_time", "target_rse", "min_sample_time"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{name} must be a number, got {value!r}")
        for name in ("cold_l2", "yardstick"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be True or False, got {getattr(self, name)!r}")
        if self.min_samples < 1:
            raise ValueError(f"min_samples must be >= 1, got {self.min_samples}")
        if self.warmup < 1:
            # The first call is never a sample: it is where JIT and autotuning happen.
            raise ValueError(f"warmup must be >= 1 (the first call is never a sample), "
                             f"got {self.warmup}")
        if not self.max_time > 0:
            raise ValueError(f"max_time must be > 0 seconds, got {self.max_time}")
        if not self.target_rse > 0:
            raise ValueError(f"target_rse must be > 0, got {self.target_rse}")

    @classmethod
    def for_profile(cls, profile: str, **overrides: Any) -> TimingConfig:
        """The defaults of a size profile, with explicit values (None: keep the default)."""
        base = cls(max_time=MAX_TIME.get(profile, MAX_TIME["full"]))
        return replace(base, **{k: v for k, v in overrides.items() if v is not None})


@dataclass
class Timing:
    """Seconds per call of each sample, their summary, and the function's last result."""

    samples: list[float]
    device: str = "cpu"
    inner: int = 1  # calls per sample (very short CPU calls are repeated inside a sample)
    cold_l2: bool = False
    warnings: list[str] = field(default_factory=list)
    result: Any = field(default=None, repr=False, compare=False)
    recorded_as: str | None = None  # the metric name hpml.time recorded it under
    yardstick: float | None = None  # seconds of the machine's yardstick, timed alongside

    @property
    def summary(self) -> Summary:
        return summarize(self.samples)

    @property
    def n(self) -> int:
        return len(self.samples)

    @property
    def median(self) -> float:
        return self.summary.median

    @property
    def iqr(self) -> float:
        return self.summary.iqr

    @property
    def min(self) -> float:
        return self.summary.min

    @property
    def mean(self) -> float:
        return self.summary.mean

    @property
    def cv(self) -> float:
        return self.summary.cv

    def __repr__(self) -> str:
        s = self.summary
        return (f"Timing(median={s.median * 1e3:.4g} ms, iqr={s.iqr * 1e3:.3g} ms, n={s.n}, "
                f"device={self.device})")


class Clock(Protocol):
    """Runs `count` samples of `inner` calls each and returns seconds per call per sample."""

    device: str

    def run(self, fn: Callable[[], Any], count: int, inner: int) -> list[float]: ...


class CpuClock:
    """The host's wall clock: CPU work, and whole programs that end synchronized with a GPU."""

    device = "cpu"

    def __init__(self, now_ns: Callable[[], int] = time.perf_counter_ns) -> None:
        self._now_ns = now_ns

    def run(self, fn: Callable[[], Any], count: int, inner: int) -> list[float]:
        out = []
        for _ in range(count):
            start = self._now_ns()
            for _ in range(inner):
                fn()
            out.append((self._now_ns() - start) / 1e9 / inner)
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
    #: A batch measured while the SM clock was below this share of its maximum was throttled
    #: (power or thermal limits): its samples describe the cooling, not the kernel (nvbench
    #: drops them too).
    THROTTLE_RATIO = 0.9

    def __init__(
        self,
        event_factory: Callable[[], Any],
        synchronize: Callable[[], None],
        flush_l2: Callable[[], Any] | None = None,
        device: str = "cuda",
        busy_wait: Callable[[float], Any] | None = None,
        now: Callable[[], float] = time.perf_counter,
        sm_clock: Callable[[], tuple[float, float]] | None = None,
    ) -> None:
        self._event = event_factory
        self._synchronize = synchronize
        self._flush_l2 = flush_l2
        self._busy_wait = busy_wait
        self._now = now
        self._sm_clock = sm_clock  # () -> (current, maximum) SM clock, e.g. through NVML
        self._host_per_sample = self.FIRST_HOST_ESTIMATE
        self.device = device
        self.flushes_l2 = flush_l2 is not None
        self.throttled = 0  # samples dropped because the clock was throttled
        self.clocks: list[float] = []  # SM clock after each batch

    def run(self, fn: Callable[[], Any], count: int, inner: int) -> list[float]:
        out: list[float] = []
        kept_throttled: list[float] = []
        attempts = 0
        while len(out) < count:
            part = count - len(out)
            if self._busy_wait is not None:
                fits = int(self.MAX_BUSY_WAIT / (self.BUSY_WAIT_MARGIN * self._host_per_sample))
                part = max(1, min(part, fits))
            samples = self._run_batch(fn, part, inner)
            attempts += 1
            if self._throttled():
                self.throttled += len(samples)
                kept_throttled += samples
                if attempts < 3 * max(1, count):
                    continue
                out.extend(kept_throttled[:count - len(out)])  # throttled throughout: keep
                break
            out.extend(samples)
        return out

    def _throttled(self) -> bool:
        if self._sm_clock is None:
            return False
        current, maximum = self._sm_clock()
        self.clocks.append(current)
        return maximum > 0 and current < self.THROTTLE_RATIO * maximum

    def warnings(self) -> list[str]:
        if not self.throttled:
            return []
        return [f"{self.throttled} sample(s) taken while the SM clock was below "
                f"{self.THROTTLE_RATIO:.0%} of its maximum (throttled) were measured again"]

    def _run_batch(self, fn: Callable[[], Any], count: int, inner: int) -> list[float]:
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
        # One host synchronization for the batch: syncing per sample would add launch gaps.
        self._synchronize()
        return [start.elapsed_time(end) / 1e3 / inner for start, end in pairs]


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

    props = torch.cuda.get_device_properties(device)
    flush = None
    if cold_l2:
        l2 = getattr(props, "L2_cache_size", 64 * 2**20)
        scratch = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
        flush = scratch.zero_
    with torch.cuda.device(device):
        rate = calibrate_cycles_per_second(lambda: torch.cuda.Event(enable_timing=True),
                                           lambda: torch.cuda.synchronize(device),
                                           torch.cuda._sleep)
    return CudaClock(
        event_factory=lambda: torch.cuda.Event(enable_timing=True),
        synchronize=lambda: torch.cuda.synchronize(device),
        flush_l2=flush,
        device=str(device),
        busy_wait=lambda seconds: torch.cuda._sleep(int(seconds * rate)),
        sm_clock=_nvml_sm_clock(torch.device(device)),
    )


def _nvml_sm_clock(device: Any) -> Callable[[], tuple[float, float]] | None:  # pragma: no cover
    """(current, maximum) SM clock in MHz through NVML; None without nvidia-ml-py."""
    from pytest_hpml.measure.utilization import NvmlSource

    source = NvmlSource.for_device(device)
    if source is None:
        return None
    nvml, handle = source.nvml, source.handle
    maximum = nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM)
    return lambda: (nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM), maximum)


def measure(
    fn: Callable[..., Any],
    args: tuple = (),
    kwargs: dict | None = None,
    *,
    clock: Clock,
    config: TimingConfig = TimingConfig(),
    wall_ns: Callable[[], int] = time.perf_counter_ns,
) -> Timing:
    """Warm up, then sample in batches until the relative standard error or the cap says stop."""
    kwargs = kwargs or {}
    last: list[Any] = [None]

    def call() -> Any:
        last[0] = fn(*args, **kwargs)

    warm = clock.run(call, config.warmup, 1)
    inner = 1
    flushes = bool(getattr(clock, "flushes_l2", False))
    if not flushes and clock.device == "cpu":
        # Later warm-up calls show the steady state; with one warm-up call the first (slow)
        # call is all there is, which errs towards fewer repeats, never towards more.
        fastest_warm = min(warm[1:] or warm)
        if fastest_warm < config.min_sample_time:
            # perf_counter's resolution and call overhead dominate sub-20 us calls.
            inner = max(1, math.ceil(config.min_sample_time / max(fastest_warm, 1e-9)))

    warnings: list[str] = []
    batch = config.min_samples
    # A call so long that min_samples of them overrun the cap: the cap lowers the first
    # batch, down to the floor (a 5 s call must not take 55 s in a 0.5 s quick cap). A slow
    # first call (compilation) only shrinks the first batch: later ones grow again.
    per_call = min(warm)
    if per_call * config.min_samples > config.max_time:
        batch = min(config.min_samples,
                    max(MIN_SAMPLES_FLOOR, int(config.max_time / max(per_call, 1e-12))))

    samples: list[float] = []
    started = wall_ns()
    while True:
        samples.extend(clock.run(call, batch, inner))
        elapsed = (wall_ns() - started) / 1e9
        if len(samples) >= config.max_samples or elapsed >= config.max_time:
            break
        if len(samples) >= config.min_samples:
            s = summarize(samples)
            if s.relative_standard_error <= config.target_rse:
                break
        per_sample = elapsed / max(len(samples), 1)
        remaining = config.max_time - elapsed
        # Grow batches so the synchronize and bookkeeping stay a small share of the time.
        batch = max(1, min(len(samples), int(remaining / max(per_sample, 1e-9)) + 1,
                           config.max_samples - len(samples)))

    if len(samples) < config.min_samples:
        warnings.append(
            f"{len(samples)} samples instead of min_samples={config.min_samples}: one call "
            f"takes ~{per_call:.3g} s and the time cap is {config.max_time:g} s (floor "
            f"{MIN_SAMPLES_FLOOR}); raise --hpml-max-time or @pytest.mark.hpml(max_time=...) "
            "for more")
    warnings += getattr(clock, "warnings", list)()
    # cold_l2 says what happened: a host clock never flushes, whatever the test asked for.
    timing = Timing(samples=samples, device=clock.device, inner=inner, cold_l2=flushes,
                    warnings=warnings, result=last[0],
                    yardstick=getattr(clock, "yardstick_seconds", None))
    ratio = noise_ratio(timing.summary)
    if ratio is not None:
        timing.warnings.append(
            f"noisy timing: IQR is {ratio:.0%} of the median over {timing.n} samples")
    return timing
