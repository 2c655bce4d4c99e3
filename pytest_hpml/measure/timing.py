"""The adaptive sampler: warm-up, then samples in batches on a clock (pytest_hpml.measure.clocks)
until the mean is tight or the time cap is reached; it returns a Timing.

Measuring is separate from presenting (as in torch.utils.benchmark): this module returns a
Timing; the fixture records it and the report renders it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from pytest_hpml.measure.clocks import Call, Clock
from pytest_hpml.measure.stats import Summary, noise_ratio, summarize

#: The sampling time cap per profile: quick runs are smoke runs of the labs on a small CPU.
MAX_TIME = {"quick": 0.5, "full": 3.0}
#: The fewest samples a timing takes when the time cap forbids min_samples (a 5 s call in a
#: 0.5 s cap): enough for a median and an IQR, said in the timing's warnings.
MIN_SAMPLES_FLOOR = 3


def _int_at_least(low: int) -> Callable[[Any], bool]:
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= low


def _seconds(low_open: bool = True) -> Callable[[Any], bool]:
    """A finite number above 0 (or at least 0): an infinite cap never ends a timing."""
    return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool)
                      and math.isfinite(v) and (v > 0 if low_open else v >= 0))


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


#: The rule of every field of the sampling policy and what to write instead: TimingConfig
#: checks itself with them, and @pytest.mark.hpml checks its timing options with them.
POLICY_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "min_samples": (_int_at_least(1), "an int >= 1, e.g. min_samples=5"),
    "max_time": (_seconds(), "finite seconds > 0, e.g. max_time=2.0"),
    "target_rse": (_seconds(), "a fraction > 0, e.g. target_rse=0.01"),
    "warmup": (_int_at_least(1), "an int >= 1 (the first call is never a sample), e.g. "
                                 "warmup=2"),
    "cold_l2": (_flag, "True or False"),
    "yardstick": (_flag, "True or False"),
    "min_sample_time": (_seconds(low_open=False), "seconds >= 0, e.g. 20e-6"),
    "max_samples": (_int_at_least(1), "an int >= 1, e.g. 100_000"),
}


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
        for name, (check, what) in POLICY_RULES.items():
            value = getattr(self, name)
            if not check(value):
                raise ValueError(f"{name} takes {what}, got {value!r}")

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
    compute_yardstick: float | None = None  # seconds of its compute-bound reference
    pace_tracked: bool = False  # the samples moved with that reference within the run

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


#: A call whose one-call sample took under this many times min_sample_time is sampled twice
#: when choosing calls per sample: a second call may still be slower than the steady state.
RECHECK_BELOW = 50
#: Most rounds of choosing the calls per sample (each at least doubles them).
CALIBRATION_ROUNDS = 12


def calls_per_sample(clock: Clock, call: Call, min_sample_time: float, first_guess: float
                     ) -> tuple[int, list[float]]:
    """How many calls a CPU sample repeats so that it lasts at least `min_sample_time`, chosen
    from timed samples after the warm-up (as timeit's autorange does), never from the warm-up
    calls: the first call of an op (lazy initialization, allocation) can be a thousand times
    slower than the next, and judged by it a 1 us call got one call per sample. Returns the
    calls per sample and the samples taken with it, which are real samples."""
    inner = 1
    for _ in range(CALIBRATION_ROUNDS):
        cheap = inner > 1 or first_guess < RECHECK_BELOW * min_sample_time
        taken = clock.run(call, 2 if cheap else 1, inner, time_left=0.0)
        per_call = min(taken)
        first_guess = per_call
        if per_call * inner >= min_sample_time:
            return inner, taken
        # Aim a quarter above the target, so noise does not leave the next round short.
        inner = max(2 * inner, math.ceil(1.25 * min_sample_time / max(per_call, 1e-9)))
    return inner, []


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
    call = Call(fn, args, kwargs)
    warm = clock.run(call, config.warmup, 1, time_left=0.0, warmup=True)
    inner = 1
    samples: list[float] = []
    started = wall_ns()  # choosing the calls per sample is part of the sampling time
    flushes = bool(getattr(clock, "flushes_l2", False))
    if not flushes and clock.device == "cpu" and config.min_sample_time > 0:
        # perf_counter's resolution and its own cost dominate calls of a few microseconds:
        # they are repeated inside a sample until it lasts min_sample_time.
        inner, samples = calls_per_sample(clock, call, config.min_sample_time,
                                          min(warm[1:] or warm))

    warnings: list[str] = []
    # A call so long that min_samples of them overrun the cap: the cap lowers the first
    # batch, down to the floor (a 5 s call must not take 55 s in a 0.5 s quick cap). A slow
    # first call (compilation) only shrinks the first batch: later ones grow again.
    per_call = min(warm + samples)
    wanted = config.min_samples
    if per_call * inner * config.min_samples > config.max_time:
        wanted = min(config.min_samples,
                     max(MIN_SAMPLES_FLOOR, int(config.max_time / max(per_call * inner, 1e-12))))
    batch = max(0, wanted - len(samples))

    while True:
        if batch:
            time_left = config.max_time - (wall_ns() - started) / 1e9
            samples.extend(clock.run(call, batch, inner, time_left=time_left))
        elapsed = (wall_ns() - started) / 1e9
        if len(samples) >= config.max_samples or elapsed >= config.max_time:
            break
        if len(samples) >= config.min_samples:
            s = summarize(samples)
            if s.relative_standard_error <= config.target_rse:
                break
        per_sample = elapsed / max(len(samples), 1) if elapsed > 0 else per_call * inner
        remaining = config.max_time - elapsed
        # Grow batches so the synchronize and bookkeeping stay a small share of the time.
        batch = max(1, min(max(len(samples), 1), int(remaining / max(per_sample, 1e-9)) + 1,
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
                    warnings=warnings, result=call.result,
                    yardstick=getattr(clock, "yardstick_seconds", None),
                    compute_yardstick=getattr(clock, "compute_seconds", None),
                    pace_tracked=getattr(clock, "tracks_pace", False))
    ratio = noise_ratio(timing.summary)
    if ratio is not None:
        timing.warnings.append(
            f"noisy timing: IQR is {ratio:.0%} of the median over {timing.n} samples")
    return timing


def check_timed_work(fn: Any, where: str) -> None:
    """Refuse a generator or coroutine function: calling one only creates the generator or
    coroutine (a few hundred nanoseconds whatever its body does), so its timing would hide
    any slowdown of the work. The caller says how the work is run."""
    import inspect

    name = getattr(fn, "__qualname__", None) or getattr(getattr(fn, "func", None),
                                                          "__qualname__", repr(fn))
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise TypeError(f"{where}: {name} is a generator function: a call only creates the "
                        "generator, its body would not be timed; pass a function that runs it, "
                        f"e.g. lambda: list({name}(...))")
    if inspect.iscoroutinefunction(fn):
        raise TypeError(f"{where}: {name} is a coroutine function: a call only creates the "
                        "coroutine, its body would not be timed; pass a function that runs it, "
                        f"e.g. lambda: asyncio.run({name}(...)) (the event loop's start is "
                        "then timed with it) or time the awaited work inside the coroutine")


def check_timed_result(result: Any) -> None:
    """The same for a function that returns a generator or coroutine (a lambda around one)."""
    import inspect

    if inspect.iscoroutine(result):
        result.close()  # never awaited by design: no RuntimeWarning at exit
    if inspect.isgenerator(result) or inspect.iscoroutine(result) or inspect.isasyncgen(result):
        kind = "generator" if not inspect.iscoroutine(result) else "coroutine"
        runner = "list(...)" if kind == "generator" else "asyncio.run(...)"
        raise TypeError(f"the timed function returned a {kind}: only its creation was "
                        f"timed, not its work; run it inside the timed function, e.g. {runner}")


def finite_samples(name: str, samples: Any) -> list[float]:
    """Samples timed elsewhere (record_timing) as finite numbers: a NaN broke the median."""
    found = []
    for i, value in enumerate(samples):
        number = float(value.item() if hasattr(value, "item") else value)
        if not math.isfinite(number):
            raise ValueError(f"metric {name!r}: sample {i} is {number}; samples must be finite "
                             "numbers")
        found.append(number)
    return found


def per_call_time(name: str, timing: Timing) -> float:
    """The timing's median as the divisor of a rate (record_bandwidth, record_flops)."""
    if not timing.median > 0:
        raise ValueError(f"metric {name!r}: the timing {timing.recorded_as!r} has a median of "
                         f"{timing.median} s; a rate needs a time above 0 (time more work per "
                         "sample)")
    return timing.median
