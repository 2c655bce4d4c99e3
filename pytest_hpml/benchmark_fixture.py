"""The `benchmark` fixture's object: pytest-benchmark's calling conventions on pytest-hpml's
timing, recording, baselines and verdicts (pytest_hpml.benchmark registers the fixture).

    benchmark(fn, *args, **kwargs) -> fn's result       adaptive sampling, as hpml.time
    benchmark.pedantic(target, args=(), kwargs=None, setup=None, teardown=None, rounds=1,
                       warmup_rounds=0, iterations=1)    exactly the rounds asked for
    benchmark.extra_info, .group, .name, .fullname, .param, .params, .stats, .disabled

The time is recorded as the metric `time` of the test's own row (its record id is the test's
node id, which is pytest-benchmark's `fullname`), so --hpml-compare judges it and a saved
pytest-benchmark run can seed its baseline (pytest_hpml.compare.seed).

The clock follows the call's device, as hpml.time's does: CUDA events when the test's `device`
parameter is "cuda" or an argument of the call lives on a CUDA device; the wall clock with a
synchronize after each call when CUDA is in use in the process but not visibly by the call (a
closure over CUDA tensors); perf_counter otherwise.
"""

from __future__ import annotations

import functools
import math
import statistics
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from pytest_hpml.compare.bulk import collector_paused
from pytest_hpml.fixture import Hpml
from pytest_hpml.measure.benchmark_stats import BenchmarkStats
from pytest_hpml.measure.clocks import ClockKind, clock_for
from pytest_hpml.measure.timing import POLICY_RULES, check_timed_result, check_timed_work
from pytest_hpml.measure.yardstick import YardstickClock, stamp
from pytest_hpml.recorder import Recorder

#: @pytest.mark.benchmark options and the TimingConfig field each one sets.
TIMING_OPTIONS = {"min_rounds": "min_samples", "max_time": "max_time",
                  "min_time": "min_sample_time"}
#: Options pytest-benchmark knows that have no meaning here, and why (said once per run).
NOT_USED = {
    "timer": "pytest-hpml picks the clock by device (CUDA events for a call on CUDA data, "
             "perf_counter on a CPU)",
    "calibration_precision": "pytest-hpml repeats a call shorter than min_time inside one "
                             "sample instead of calibrating",
    "warmup_iterations": "pytest-hpml warms up with one call (@pytest.mark.hpml(warmup=N) "
                         "for more)",
    "cprofile": "pytest-hpml does not profile",
}
MARKER_OPTIONS = ("group", "disable_gc", "warmup", "precision", "confidence",
                  *TIMING_OPTIONS, *NOT_USED)
#: pytest-benchmark's default confidence for `precision`.
DEFAULT_CONFIDENCE = 0.99


class FixtureAlreadyUsed(Exception):
    """pytest-benchmark's rule, kept: one benchmark per test."""


@dataclass
class BenchmarkOptions:
    """What @pytest.mark.benchmark asks of one test, in pytest-hpml's terms."""

    group: str | None = None
    disable_gc: bool = False
    timing: dict[str, Any] = field(default_factory=dict)  # TimingConfig overrides
    not_used: list[str] = field(default_factory=list)  # one line each, said once per run
    group_by: list[str] = field(default_factory=lambda: ["group"])  # --benchmark-group-by


def marker_options(item: pytest.Item) -> BenchmarkOptions:
    """The test's @pytest.mark.benchmark options (closest marker wins), checked; a malformed
    marker is a usage error naming the test."""
    kwargs: dict[str, Any] = {}
    for marker in reversed(list(item.iter_markers("benchmark"))):
        if marker.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.benchmark takes keyword "
                                    f"options only, got {marker.args!r}")
        kwargs.update(marker.kwargs)
    unknown = sorted(set(kwargs) - set(MARKER_OPTIONS))
    if unknown:
        raise pytest.UsageError(f"{item.nodeid}: unknown @pytest.mark.benchmark option(s) "
                                f"{unknown}; known: {', '.join(MARKER_OPTIONS)}")
    options = BenchmarkOptions(group=kwargs.get("group"),
                               disable_gc=bool(kwargs.get("disable_gc", False)))
    for name, field_name in TIMING_OPTIONS.items():
        if name in kwargs:
            value = kwargs[name]
            check, what = POLICY_RULES[field_name]
            if not check(value):
                raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.benchmark({name}="
                                        f"{value!r}): {name} takes {what.split(', e.g.')[0]}")
            options.timing[field_name] = value
    if kwargs.get("precision") is not None:
        options.timing["target_rse"] = _target_rse(item, kwargs["precision"],
                                                   kwargs.get("confidence"))
    for name, why in NOT_USED.items():
        if name in kwargs:
            options.not_used.append(f"@pytest.mark.benchmark({name}=...) is not used: {why}")
    if kwargs.get("warmup") is False:
        options.not_used.append("@pytest.mark.benchmark(warmup=False) is not used: "
                                "pytest-hpml always warms up (the first call is never a sample)")
    return options


def _target_rse(item: pytest.Item, precision: Any, confidence: Any) -> float:
    """pytest-benchmark's precision (the relative half-width of the mean's confidence interval)
    as pytest-hpml's stopping rule (the relative standard error of the mean)."""
    confidence = DEFAULT_CONFIDENCE if confidence is None else confidence
    if not (isinstance(precision, (int, float)) and precision > 0
            and isinstance(confidence, (int, float)) and 0 < confidence < 1):
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.benchmark(precision="
                                f"{precision!r}, confidence={confidence!r}): precision takes a "
                                "fraction > 0 and confidence one in (0, 1), e.g. precision=0.02")
    return precision / statistics.NormalDist().inv_cdf(0.5 + confidence / 2)


# -- the clock of a call -------------------------------------------------------------------------

def _on_cuda(value: Any, depth: int = 0) -> bool:
    """Whether a call argument lives on a CUDA device: a tensor, a module's parameters, a
    torch.device or "cuda", looked for two levels into lists, tuples and dicts."""
    if getattr(value, "is_cuda", None) is True:  # a tensor (or anything that says so)
        return True
    if isinstance(value, str):
        return value == "cuda" or value.startswith("cuda:")
    if depth < 3 and isinstance(value, (list, tuple, dict)):  # the call's args, two more
        items = value.values() if isinstance(value, dict) else value
        return any(_on_cuda(v, depth + 1) for v in items)
    torch = sys.modules.get("torch")  # not imported: nothing can be on a GPU
    if torch is None:
        return False
    if isinstance(value, torch.device):
        return value.type == "cuda"
    if isinstance(value, torch.nn.Module):
        first = next(iter(value.parameters()), None)
        return bool(first is not None and first.is_cuda)
    return False


def cuda_in_use() -> bool:
    """CUDA started in this process (never starts it: a CPU test stays a CPU test)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


@dataclass(frozen=True)
class ClockChoice:
    device: str  # the context's device: "cuda" for any call that uses the GPU
    kind: ClockKind  # "device": CUDA events on a CUDA device; "host": the wall clock
    synchronize: bool  # wait for the GPU after each call (a host clock on GPU work)


def choose_clock(args: tuple, kwargs: dict[str, Any], params: dict[str, Any],
                 cuda_started: Callable[[], bool] = cuda_in_use) -> ClockChoice:
    if params.get("device") == "cuda" or _on_cuda(args) or _on_cuda(kwargs):
        return ClockChoice("cuda", "device", False)
    if cuda_started():
        # The call may queue GPU work through what it closes over: the wall clock is right
        # for it once each call ends with the GPU done.
        return ClockChoice("cuda", "host", True)
    return ClockChoice("cpu", "device", False)


def _synchronized(fn: Callable[[], Any]) -> Callable[[], Any]:
    """fn, then a wait for the GPU: the wall clock then times the GPU work fn queued."""
    import torch

    def call() -> Any:
        result = fn()
        torch.cuda.synchronize()
        return result
    return call


# -- the fixture ---------------------------------------------------------------------------------

class BenchmarkFixture:
    """pytest-benchmark's `benchmark`, timed and recorded by pytest-hpml (see the module)."""

    def __init__(self, hpml: Hpml, item: pytest.Item, options: BenchmarkOptions) -> None:
        callspec = getattr(item, "callspec", None)
        self.name: str = item.name
        self.fullname: str = item.nodeid
        self.param: str | None = callspec.id if callspec else None
        self.params: dict[str, Any] | None = dict(callspec.params) if callspec else None
        self.group: str | None = options.group
        self.extra_info: dict[str, Any] = {}
        self.stats: BenchmarkStats | None = None
        self.disabled: bool = hpml.context.disabled
        self._hpml = hpml
        self._options = options
        self._mode: str | None = None

    @property
    def enabled(self) -> bool:
        return not self.disabled

    def __call__(self, function_to_benchmark: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> Any:
        """Time fn(*args, **kwargs) as hpml.time does and return its result."""
        self._use("benchmark(...)")
        check_timed_work(function_to_benchmark, "benchmark(...)")
        if self.disabled:
            return self._call_once(function_to_benchmark, args, kwargs)
        choice = choose_clock(args, kwargs, self.params or {})
        call, call_args, call_kwargs = function_to_benchmark, args, kwargs
        if choice.synchronize or {"name", "clock"} & set(kwargs):
            # One more call layer, only where needed: it is part of every sample of a
            # sub-microsecond call (fn's own `name` or `clock` keywords must not reach hpml.time).
            call, call_args, call_kwargs = functools.partial(function_to_benchmark, *args,
                                                             **kwargs), (), {}
            if choice.synchronize:
                call = _synchronized(call)
        with collector_paused(self._options.disable_gc):
            timing = self._recorder(choice).time(call, *call_args, name="time",
                                                 clock=choice.kind, **call_kwargs)
        self.stats = BenchmarkStats(timing.samples, timing.inner, self)
        return timing.result

    def pedantic(self, target: Callable[..., Any], args: tuple = (),
                 kwargs: dict[str, Any] | None = None, setup: Callable[[], Any] | None = None,
                 teardown: Callable[..., Any] | None = None, rounds: int = 1,
                 warmup_rounds: int = 0, iterations: int = 1) -> Any:
        """Exactly `rounds` samples of `iterations` calls each, after `warmup_rounds`; setup()
        before each round (its return value, if any, is (args, kwargs)), teardown(*args,
        **kwargs) after it, neither timed."""
        self._use("benchmark.pedantic(...)")
        check_timed_work(target, "benchmark.pedantic(...)")
        kwargs = dict(kwargs or {})
        _check_pedantic(rounds, warmup_rounds, iterations, setup)

        def arguments() -> tuple[tuple, dict[str, Any]]:
            made = setup() if setup is not None else None
            if not made:
                return tuple(args), kwargs
            if args or kwargs:
                raise TypeError("benchmark.pedantic: setup returned the arguments, so args= "
                                "and kwargs= must be left out")
            if not (isinstance(made, (tuple, list)) and len(made) == 2
                    and isinstance(made[0], (tuple, list))
                    and isinstance(made[1], (dict, type(None)))):
                raise TypeError(f"benchmark.pedantic: setup must return (args, kwargs), e.g. "
                                f"return (data,), {{}}; it returned {made!r}")
            return tuple(made[0]), dict(made[1] or {})

        def finish(call_args: tuple, call_kwargs: dict[str, Any]) -> None:
            if teardown is not None:
                teardown(*call_args, **call_kwargs)

        if self.disabled:
            call_args, call_kwargs = arguments()
            result = self._call_once(target, call_args, call_kwargs)
            finish(call_args, call_kwargs)
            return result
        last: list[Any] = [None]

        def calling(call_args: tuple, call_kwargs: dict[str, Any]) -> Callable[[], None]:
            def call() -> None:
                last[0] = target(*call_args, **call_kwargs)
            return _synchronized(call) if choice.synchronize else call

        call_args, call_kwargs = arguments()
        choice = choose_clock(call_args, call_kwargs, self.params or {})
        recorder = self._recorder(choice)
        clock: Any = clock_for(recorder.context.device, choice.kind,
                               cold_l2=recorder.context.timing.cold_l2)
        per_round = setup is not None or teardown is not None
        if not per_round and choice.device == "cpu" and recorder.context.timing.yardstick:
            clock = YardstickClock(clock)  # rounds in one batch: the yardstick between them
        samples: list[float] = []
        with collector_paused(self._options.disable_gc):
            if not per_round:
                call = calling(call_args, call_kwargs)
                if warmup_rounds:
                    clock.run(call, warmup_rounds, iterations, warmup=True)
                samples = clock.run(call, rounds, iterations)
            else:
                for i in range(warmup_rounds + rounds):
                    if i:
                        call_args, call_kwargs = arguments()
                    sample = clock.run(calling(call_args, call_kwargs), 1, iterations,
                                       warmup=i < warmup_rounds)
                    finish(call_args, call_kwargs)
                    if i >= warmup_rounds:
                        samples += sample
        check_timed_result(last[0])
        recorder.record_timing("time", samples, warnings=getattr(clock, "warnings", list)())
        stamp(recorder.metric("time"), clock)
        self.stats = BenchmarkStats(samples, iterations, self)
        return last[0]

    def weave(self, target: Any, **kwargs: Any) -> None:
        raise NotImplementedError(
            "benchmark.weave / benchmark.patch (aspectlib) is pytest-benchmark's alone: under "
            "pytest-hpml call benchmark(fn, *args) on the function instead, or run this test "
            "with pytest-benchmark active (without -p no:benchmark)")

    patch = weave

    # -- the plugin's side ---------------------------------------------------------------------
    def _call_once(self, fn: Callable[..., Any], args: tuple, kwargs: dict[str, Any]) -> Any:
        """--hpml-disable: one call, as a plain test makes it. Its wall time is the stats' one
        round, so a test that reads benchmark.stats still runs; nothing is recorded."""
        # One call: the context says so. partial: fn's own `name` or `clock` keywords pass.
        timing = self._hpml.own_row.time(functools.partial(fn, *args, **kwargs))
        self.stats = BenchmarkStats(timing.samples, 1, self)
        return timing.result

    def _use(self, mode: str) -> None:
        if self._mode:
            raise FixtureAlreadyUsed(
                f"the benchmark fixture can be used once per test; it was used as {self._mode} "
                "already. Time the other call in a test of its own, or with "
                "hpml.time(fn, name='...') (the hpml fixture) for several timings in one test")
        self._mode = mode

    def _recorder(self, choice: ClockChoice) -> Recorder:
        own = self._hpml.own_row
        try:
            timing = replace(own.context.timing, **self._options.timing)
        except ValueError as exc:  # min_time beyond max_time and the like
            raise pytest.UsageError(f"{self.fullname}: @pytest.mark.benchmark: {exc}") from None
        return own.with_context(device=choice.device, timing=timing)

    def table_title(self) -> str:
        """The table this row is shown in: "benchmark", then the labels of
        --benchmark-group-by (pytest-benchmark's grouping; by default the group, if any)."""
        labels = []
        for part in self._options.group_by:
            if part == "group":
                labels += [repr(self.group)] if self.group is not None else []
            elif part in ("name", "fullname"):
                labels.append(getattr(self, part))
            elif part in ("func", "fullfunc"):
                labels.append((self.name if part == "func" else self.fullname).split("[")[0])
            elif part == "param":
                labels += [self.param] if self.param is not None else []
            else:  # param:NAME
                name = part.split(":", 1)[1]
                if name in (self.params or {}):
                    labels.append(f"{name}={self.params[name]}")
        return " ".join(["benchmark", *labels])

    def finish(self) -> None:
        """At the end of the test, before its records are judged and sent: the group names
        the table, extra_info is shown beside the time (numbers as settings, text as a
        column)."""
        if self.disabled or self._mode is None:
            return
        hpml = self._hpml
        hpml.experiment = self.table_title()
        # The file too: two tests named alike in two files are two rows told apart.
        test = self.fullname.split("[", 1)[0]
        if "test" not in (self.params or {}):
            hpml.param(test=test)
        for key, value in self.extra_info.items():
            if (self.params or {}).get(key, object()) == value:
                continue  # a parameter's value again: its column shows it
            # A name the row already uses (a metric, the test column, a parameter) is kept
            # for it: the extra figure is shown beside it, not in its place.
            taken = hpml.metric(key) is not None or key in hpml.own_row._record.params
            name = f"extra_info.{key}" if taken else key
            if isinstance(value, bool):  # JSON's words, as pytest-benchmark's file has them
                hpml.param(**{name: "true" if value else "false"})
            elif isinstance(value, (int, float)) and math.isfinite(value):
                hpml.setting(name, value)
            else:
                hpml.param(**{name: str(value)})


def _check_pedantic(rounds: Any, warmup_rounds: Any, iterations: Any, setup: Any) -> None:
    """pytest-benchmark's rules for pedantic, with what to write instead."""
    def whole(v: Any, low: int) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= low
    if not whole(iterations, 1):
        raise ValueError(f"benchmark.pedantic: iterations takes an int >= 1, got {iterations!r}")
    if not whole(rounds, 1):
        raise ValueError(f"benchmark.pedantic: rounds takes an int >= 1, got {rounds!r}")
    if not whole(warmup_rounds, 0):
        raise ValueError(f"benchmark.pedantic: warmup_rounds takes an int >= 0, got "
                         f"{warmup_rounds!r}")
    if iterations > 1 and setup is not None:
        raise ValueError("benchmark.pedantic: iterations > 1 cannot be used with setup (setup "
                         "runs once per round); use rounds= for more samples")
