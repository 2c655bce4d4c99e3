"""Device-aware timers with warm-up and adaptive sampling.

Measuring is separate from presenting (as in torch.utils.benchmark): this module returns a
Timing; the fixture records it and the report renders it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from pytest_hpml.stats import Summary, summarize

#: IQR / median at or above this makes a timing "noisy" (said in the report).
NOISY_IQR_RATIO = 0.10


@dataclass(frozen=True)
class TimingConfig:
    """Sampling policy, in the spirit of nvbench: enough samples, stop when the mean is tight."""

    min_samples: int = 10
    max_time: float = 3.0  # seconds of sampling (after warm-up) before stopping anyway
    target_rse: float = 0.005  # stop once stdev / sqrt(n) / mean falls below this
    warmup: int = 1  # calls before the first sample: JIT compilation, autotuning, caches
    cold_l2: bool = False  # CUDA: flush L2 before every sample, outside the timed region
    min_sample_time: float = 20e-6  # CPU: repeat very short calls inside one sample
    max_samples: int = 100_000

    def __post_init__(self) -> None:
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


@dataclass
class Timing:
    """Seconds per call of each sample, and their summary."""

    samples: list[float]
    device: str = "cpu"
    inner: int = 1  # calls per sample (very short CPU calls are repeated inside a sample)
    cold_l2: bool = False
    warnings: list[str] = field(default_factory=list)

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
    """CUDA events around each sample and a single synchronize per batch.

    The event API is injected so that this logic runs on CPU in tests with a fake; the real
    one is torch.cuda.Event(enable_timing=True) and torch.cuda.synchronize.
    """

    #: Host time per sample assumed before one has been measured (a launch and two events).
    FIRST_HOST_ESTIMATE = 50e-6
    #: Longest GPU busy-wait queued ahead of a batch.
    MAX_BUSY_WAIT = 0.05

    def __init__(
        self,
        event_factory: Callable[[], Any],
        synchronize: Callable[[], None],
        flush_l2: Callable[[], Any] | None = None,
        device: str = "cuda",
        busy_wait: Callable[[float], Any] | None = None,
        now: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._event = event_factory
        self._synchronize = synchronize
        self._flush_l2 = flush_l2
        self._busy_wait = busy_wait
        self._now = now
        self._host_per_sample = self.FIRST_HOST_ESTIMATE
        self.device = device

    def run(self, fn: Callable[[], Any], count: int, inner: int) -> list[float]:
        if self._busy_wait is not None:
            # Keep the GPU busy while the host queues the whole batch (as nvbench's blocking
            # kernel does): otherwise an idle GPU stamps the start event at once and a short
            # kernel's sample measures the host's launch path instead of the kernel.
            self._busy_wait(min(self.MAX_BUSY_WAIT, 1.5 * count * self._host_per_sample))
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

    def call() -> Any:
        return fn(*args, **kwargs)

    warm = clock.run(call, config.warmup, 1)
    inner = 1
    if not config.cold_l2 and clock.device == "cpu":
        # Later warm-up calls show the steady state; with one warm-up call the first (slow)
        # call is all there is, which errs towards fewer repeats, never towards more.
        fastest_warm = min(warm[1:] or warm)
        if fastest_warm < config.min_sample_time:
            # perf_counter's resolution and call overhead dominate sub-20 us calls.
            inner = max(1, math.ceil(config.min_sample_time / max(fastest_warm, 1e-9)))

    samples: list[float] = []
    started = wall_ns()
    batch = config.min_samples
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

    timing = Timing(samples=samples, device=clock.device, inner=inner, cold_l2=config.cold_l2)
    s = timing.summary
    if s.median > 0 and s.iqr / s.median >= NOISY_IQR_RATIO:
        timing.warnings.append(
            f"noisy timing: IQR is {s.iqr / s.median:.0%} of the median over {s.n} samples"
        )
    return timing
