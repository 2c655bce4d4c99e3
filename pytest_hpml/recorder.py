"""The recording API: a Recorder times, records and checks one row of an experiment; every
Recorder of a test shares its frozen context (device, size profile, timing policy, tolerance).
The `hpml` fixture (pytest_hpml.fixture) holds the Recorder of the test's own row and makes
further rows.

Importing this module imports no torch: plain tests in a repository that installs the plugin
stay fast. torch is imported by the methods that need it.
"""

from __future__ import annotations

import contextlib
import time as clock_time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.measure.clocks import ClockKind, clock_for
from pytest_hpml.measure.memory import free_device_memory, is_out_of_memory
from pytest_hpml.measure.stats import summarize
from pytest_hpml.measure.timing import (
    Timing,
    TimingConfig,
    check_timed_result,
    check_timed_work,
    finite_samples,
    measure,
    per_call_time,
)
from pytest_hpml.measure.yardstick import YardstickClock, stamp
from pytest_hpml.results import Better, Metric, Record, check_name

if TYPE_CHECKING:
    from pytest_hpml.machine.kernels import KernelResources
    from pytest_hpml.measure.ceilings import Ceilings
    from pytest_hpml.measure.utilization import UtilizationSampler


class Unset:
    """`better` left out of hpml.record: inferred from the unit."""

    def __repr__(self) -> str:
        return "UNSET"


UNSET = Unset()
#: Units whose better direction is unambiguous: a time, and rates.
DIRECTIONS: dict[str, Better] = {"s": "lower", "B/s": "higher", "FLOP/s": "higher",
                                 "OP/s": "higher", "1/s": "higher"}


def direction(name: str, unit: str, better: Better | Unset) -> Better:
    """`better` as given, or inferred from the unit; a ValueError naming the metric where the
    unit does not say it."""
    if not isinstance(better, Unset):
        return better
    if unit in DIRECTIONS:
        return DIRECTIONS[unit]
    shown = f" (unit {unit!r})" if unit else " (no unit)"
    raise ValueError(
        f"metric {name!r}{shown}: say which way is better, hpml.record(..., better='lower' or "
        "'higher'), or better=None for a figure that is shown and never judged; a constant of "
        "the experiment is hpml.setting(...). Only a time (s) and rates (B/s, FLOP/s, OP/s, "
        "1/s) say it by their unit.")


@dataclass(frozen=True)
class HpmlContext:
    """What every Recorder of a test knows of it, fixed when the test starts."""

    device: str = "cpu"  # "cpu" or "cuda": the case of the test's `device` parameter
    profile: str = "quick"  # the run's size profile
    timing: TimingConfig = TimingConfig()  # the test's sampling policy
    tolerance: float | None = None  # @pytest.mark.hpml(tolerance=...); None: the run's
    interpreted: bool = False  # Triton kernels run in its interpreter (no GPU)
    # --hpml-disable: timings call their function once and nothing of the test is recorded.
    disabled: bool = False

    @property
    def ceilings(self) -> Ceilings:
        """This device's measured copy bandwidth and matmul FLOP/s, once per process."""
        import torch

        from pytest_hpml.measure.ceilings import ceilings_for

        return ceilings_for(torch.device(self.device), self.profile)


class OutOfMemory:
    """What `catch_out_of_memory` saw: `happened` and the allocator's first line."""

    happened: bool = False
    message: str = ""


class Recorder:
    """The recording API of one row; the test's own row and extra rows share it."""

    def __init__(self, context: HpmlContext, record: Record) -> None:
        self.context = context
        self._record = record

    def with_context(self, **changes: Any) -> Recorder:
        """This row's Recorder under a changed context (another timing policy, the device a
        call's arguments live on): what it records goes to the same row."""
        return Recorder(replace(self.context, **changes), self._record)

    # -- rows and columns ------------------------------------------------------------------------
    def param(self, **columns: Any) -> None:
        """Extra parameter columns for this row (for example data="synthetic-MNIST")."""
        self._record.params.update(columns)

    def metric(self, name: str) -> Metric | None:
        """The metric recorded under `name` in this row, if any."""
        return self._record.metric(name)

    def annotate(self, name: str, note: str) -> Metric:
        """Add a note to a metric already recorded (shown under the table)."""
        metric = self._record.metric(name)
        if metric is None:
            raise KeyError(f"no metric {name!r} recorded in this row; recorded: "
                           f"{[m.name for m in self._record.metrics]}")
        metric.note = f"{metric.note}; {note}" if metric.note else note
        return metric

    def expect_missing(self, *names: str) -> None:
        """Baseline metrics this row may lack without failing --hpml-compare ("*": any)."""
        self._record.expected_missing.extend(names or ("*",))

    # -- measured figures ------------------------------------------------------------------------
    def record(self, name: str, value: float, unit: str = "", better: Better | Unset = UNSET,
               *, tolerance: float | None = None, samples: list[float] | None = None,
               note: str | None = None, timing: Timing | None = None,
               exact: bool = False) -> Metric:
        """A measured metric; `value` in SI base units (s, B, B/s, FLOP/s).

        `better` says which way is better: "lower", "higher", or None (shown, never judged).
        Left out, it follows from the unit where that is unambiguous (a time: lower; B/s,
        FLOP/s, OP/s, 1/s: higher); any other measured figure must say it, or is a constant of
        the experiment (hpml.setting). A figure nobody judges would pass every comparison.

        With `exact=True` the figure is the same in every run of the same code (a count, a
        compile-time resource, a yes/no finding): a comparison judges any change beyond its
        tolerance (0 unless given) as a change, with no noise model and no confirmation run.

        With `timing=`, the metric is derived from that timing (a bandwidth, a throughput, a
        speedup over a reference: a reference's drift is its own verdict) and is judged with
        its evidence: per-sample values scale with the time (lower is better) or with its
        inverse (higher is better), and its verdict follows the timing's.
        """
        __tracebackhide__ = True  # a metric it refuses is the test's mistake, not the plugin's
        check_name(name)  # before anything else is said about a metric without a name
        better = direction(name, unit, better)
        if tolerance is None:
            tolerance = self.context.tolerance
        derived_from = None
        if timing is not None:
            if better is None:
                raise ValueError(f"metric {name!r}: a metric derived from a timing needs "
                                 "better='lower' (proportional to time) or 'higher' (a rate)")
            samples = _scaled_samples(value, timing, better)
            derived_from = timing.recorded_as
        elif better is not None and not exact:
            pair = _ratio_of_times(value, self._record.metrics)
            if pair:
                said = (f"{name} = {pair[0]} / {pair[1]}, judged on its own: a drift of either "
                        "time would read as a change of the code; give timing= the Timing of "
                        "the code under test, and the ratio follows its verdict")
                self._record.warnings.append(said)  # in the report, beside the row
                warnings.warn(RatioOfTimesWarning(said), stacklevel=2)  # pytest's summary
        metric = Metric(name=name, value=value, unit=unit, better=better, tolerance=tolerance,
                        samples=samples, note=note, derived_from=derived_from, exact=exact,
                        yardstick=timing.yardstick if timing is not None else None)
        if samples:
            metric.iqr = summarize(samples).iqr  # printed as "value ± IQR"
        return self._record.add(metric)

    def time(self, fn: Callable[..., Any], *args: Any, name: str = "time",
             clock: ClockKind = "device", **kwargs: Any) -> Timing:
        """Time fn(*args, **kwargs) and record `name` (s, lower is better). The Timing holds
        fn's last result. clock="device": CUDA events on a CUDA test, the wall clock on a CPU
        test; clock="host": the wall clock, for calls that end synchronized with the device
        (a whole program, a host-side loop)."""
        check_timed_work(fn, "hpml.time")
        if self.context.disabled:
            return self._call_once(fn, args, kwargs, name)
        config = self.context.timing
        timer = clock_for(self.context.device, clock, cold_l2=config.cold_l2)
        if config.yardstick and self.context.device == "cpu":
            timer = YardstickClock(timer)
        timing = measure(fn, args, kwargs, config=config, clock=timer)
        check_timed_result(timing.result)
        timing.recorded_as = name
        metric = self.record(name, timing.median, unit="s", better="lower",
                             samples=list(timing.samples))
        stamp(metric, timer)  # what the clock saw of the machine, as the benchmark fixture
        for warning in timing.warnings:
            self._record.warnings.append(f"{name}: {warning}")
        return timing

    @staticmethod
    def _call_once(fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any],
                   name: str) -> Timing:
        """--hpml-disable: one call, as a plain test makes it. Its wall time is the Timing's
        one sample, so figures the test derives from it still compute; nothing is recorded."""
        start = clock_time.perf_counter()
        result = fn(*args, **kwargs)
        check_timed_result(result)
        return Timing(samples=[max(clock_time.perf_counter() - start, 1e-9)], result=result,
                      recorded_as=name, warnings=["--hpml-disable: one call, not a timing"])

    def record_timing(self, name: str, samples: list[float], unit: str = "s", *,
                      warnings: Sequence[str] = ()) -> Timing:
        """A time measured elsewhere (per-step times from the ranks of a distributed run, a
        training loop's epochs) recorded as `name`, lower is better, each sample a sample; the
        Timing returned serves figures derived from it (timing=). `warnings`: what the clock
        that took the samples said of them (throttled samples kept, ...), in the row's."""
        if not samples:
            raise ValueError(f"metric {name!r}: record_timing needs at least one sample")
        samples = finite_samples(name, samples)
        timing = Timing(samples=list(samples), recorded_as=name, warnings=list(warnings))
        self.record(name, timing.median, unit=unit, better="lower", samples=list(samples))
        self._record.warnings += [f"{name}: {warning}" for warning in warnings]
        return timing

    def record_bandwidth(self, name: str, bytes_per_call: float, timing: Timing) -> Metric:
        """Bytes moved per call over the median time: B/s, higher is better."""
        return self.record(name, bytes_per_call / per_call_time(name, timing), unit="B/s",
                           better="higher", timing=timing)

    def record_flops(self, name: str, flops_per_call: float, timing: Timing,
                     unit: str = "FLOP/s") -> Metric:
        """Operations per call over the median time (FLOP/s, or OP/s for integer math)."""
        return self.record(name, flops_per_call / per_call_time(name, timing), unit=unit,
                           better="higher", timing=timing)

    def compile_kernel(self, kernel: Any, *args: Any, target: str,
                       **launch: Any) -> KernelResources:
        """Compile a Triton kernel for a GPU target (no GPU needed) as `kernel[grid](*args,
        **launch)` would be compiled on that GPU, and record what it uses: exact figures
        (registers, spill bytes, shared memory, instruction counts), the compile time when this
        run compiled it (not when Triton's cache had it), the launch options as settings."""
        from pytest_hpml.machine.kernels import compile_kernel

        resources = compile_kernel(kernel, args, launch, target)
        for column, value in (("kernel", resources.kernel), ("target", target)):
            self._record.params.setdefault(column, value)
        for figure in resources.figures():
            if figure.kind == "setting":
                self.setting(figure.name, figure.value, figure.unit)
            else:
                self.record(figure.name, figure.value, figure.unit, figure.better,
                            exact=figure.kind == "exact")
        if resources.compile_seconds is None:
            self.expect_missing("compile_time")
        return resources

    # -- figures that are not measurements -------------------------------------------------------
    def reference(self, name: str, value: float, unit: str = "", *, source: str,
                  note: str | None = None) -> Metric:
        """A published figure (paper, datasheet) shown beside the measured ones, labelled with
        its source; never stored in baselines nor exported."""
        return self._record.add(Metric(name=name, value=value, unit=unit, kind="reference",
                                       source=source, note=note))

    def setting(self, name: str, value: float, unit: str = "", *,
                note: str | None = None) -> Metric:
        """A constant of the experiment (a size, a ceiling it divides by): shown, not compared."""
        return self._record.add(Metric(name=name, value=value, unit=unit, kind="setting",
                                       note=note))

    # -- correctness -----------------------------------------------------------------------------
    def check(self, name: str, value: float, *, at_most: float | None = None,
              at_least: float | None = None, unit: str = "", note: str | None = None) -> Metric:
        """A correctness figure held to a bound: recorded, and the test fails outside it."""
        if (at_most is None) == (at_least is None):
            raise ValueError(f"check {name!r}: give exactly one of at_most= or at_least=")
        better: Better = "lower" if at_most is not None else "higher"
        limit = at_most if at_most is not None else at_least
        metric = self._record.add(Metric(name=name, value=value, unit=unit, better=better,
                                         kind="check", limit=limit, note=note))
        ok = metric.value <= limit if at_most is not None else metric.value >= limit
        if not ok:  # NaN fails both comparisons
            bound = f"<= {at_most:g}" if at_most is not None else f">= {at_least:g}"
            pytest.fail(f"{name} = {metric.value:.6g} {unit}".rstrip()
                        + f", must be {bound}", pytrace=False)
        return metric

    def check_close(self, actual: Any, expected: Any, rtol: float | None = None,
                    atol: float | None = None, name: str = "max_rel_error") -> float:
        """Fail with where, how large and how many when out of tolerance; NaN/Inf never pass."""
        from pytest_hpml.measure import tolerances

        result = tolerances.compare(actual, expected, rtol=rtol, atol=atol)
        self._record.add(Metric(name=name, value=result.max_rel_error, better="lower",
                                kind="check"))
        if result.message:
            pytest.fail(f"{name}: {result.message}", pytrace=False)
        return result.max_rel_error

    @contextlib.contextmanager
    def catch_out_of_memory(self) -> Iterator[OutOfMemory]:
        """Run a block whose out-of-memory error is a finding, not a crash.

        Records fits_in_memory (1 or 0, higher is better, judged exactly), so a later run in
        which this row no longer fits regresses from it; on out-of-memory the row's other
        metrics may be missing (a comparison then does not fail on them), the memory the block
        held is freed, and the test goes on after the block.
        """
        found = OutOfMemory()
        try:
            yield found
        except Exception as exc:  # noqa: BLE001 - only out-of-memory errors are swallowed
            if not is_out_of_memory(exc):
                raise
            found.happened = True
            found.message = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        if found.happened:
            # Outside the except block: the traceback no longer holds the block's frames, so
            # their tensors can be freed before the next batch size runs.
            free_device_memory()
            self.param(status="out of memory")
            self.expect_missing("*")
        self.record("fits_in_memory", 0.0 if found.happened else 1.0, better="higher",
                    exact=True, note=found.message or None)


    @contextlib.contextmanager
    def sample_utilization(self, interval: float = 0.5) -> Iterator[UtilizationSampler]:
        """Sample device utilization in the background while the block runs.

        On a CUDA test: GPU core and memory utilization (%), memory used (B) and SM clock (Hz)
        through nvidia-ml-py, and this process tree's CPU utilization (% of all cores); on a
        CPU test the CPU utilization only. When the block ends (exceptions included) the
        sampler stops and each series is recorded as a metric: its mean, with the series as
        samples (chart it with @pytest.mark.hpml_plot(..., kind="timeseries", y=[...])), and
        the interval as the setting sample_interval.
        """
        from pytest_hpml.measure.utilization import NvmlSource, ProcessCpuSource, UtilizationSampler

        sources: list[Any] = [ProcessCpuSource()]
        if self.context.device == "cuda":
            import torch

            nvml = NvmlSource.for_device(torch.device("cuda"))
            if isinstance(nvml, str):
                self._record.warnings.append(f"utilization: GPU not sampled: {nvml}")
            else:
                sources.insert(0, nvml)
                self._record.warnings += [f"utilization: {why}" for why in nvml.unread]
        sampler = UtilizationSampler(sources, interval)
        try:
            with sampler:
                yield sampler
        finally:
            for source in sources:
                getattr(source, "close", lambda: None)()
            self.setting("sample_interval", interval, unit="s")
            for name, values in sampler.values.items():
                if values:
                    # Utilization has no better direction: shown with its series, not judged.
                    self.record(name, sampler.mean(name), unit=sampler.units[name], better=None,
                                samples=list(values))
            for error in sampler.errors:
                self._record.warnings.append(f"utilization: {error}")


class RatioOfTimesWarning(UserWarning):
    """A figure recorded as the ratio of two times of its row without timing=."""


def _ratio_of_times(value: float, metrics: list[Metric]) -> tuple[str, str] | None:
    """The two times of the row whose ratio `value` is to the last digit (a speedup computed
    from their medians), or None."""
    times = [m for m in metrics if m.unit == "s" and m.kind == "measured" and m.value > 0]
    return next(((a.name, b.name) for a in times for b in times
                 if a is not b and value == a.value / b.value), None)


def _scaled_samples(value: float, timing: Timing, better: Better) -> list[float]:
    """Per-sample values of a metric derived from a timing's median: proportional to each
    sample's time (lower is better) or to its inverse (a rate, higher is better)."""
    median = timing.median
    if better == "lower":
        return [value * t / median for t in timing.samples] if median > 0 else []
    return [value * median / t for t in timing.samples if t > 0]
