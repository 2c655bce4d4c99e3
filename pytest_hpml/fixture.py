"""The `hpml` fixture: one object per test that times, records and checks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import torch

from pytest_hpml import devices, tolerances
from pytest_hpml.ceilings import Ceilings
from pytest_hpml.results import Better, Metric, Record
from pytest_hpml.stats import summarize
from pytest_hpml.timing import Clock, CpuClock, CudaClock, Timing, TimingConfig, measure

if TYPE_CHECKING:
    from pytest_hpml.session import HpmlSession


class Recorder:
    """The recording API of one row; the test's own row and extra rows share it."""

    def __init__(self, owner: Hpml, record: Record) -> None:
        self._owner = owner
        self._record = record

    @property
    def record_data(self) -> Record:
        return self._record

    def param(self, **columns: Any) -> None:
        """Extra parameter columns for this row (for example data="synthetic-MNIST")."""
        self._record.params.update(columns)

    def record(self, name: str, value: float, unit: str = "", better: Better = None,
               tolerance: float | None = None, samples: list[float] | None = None,
               note: str | None = None) -> Metric:
        """Record any metric; `value` in SI base units (s, B, B/s, FLOP/s)."""
        if tolerance is None:
            tolerance = self._owner._marker_option("tolerance")
        metric = Metric(name=name, value=value, unit=unit, better=better, tolerance=tolerance,
                        samples=samples, note=note)
        if samples:
            metric.iqr = summarize(samples).iqr  # printed as "value ± IQR"
        return self._record.add(metric)

    def time(self, fn: Callable[..., Any], *args: Any, name: str = "time", **kwargs: Any) -> Timing:
        """Time fn(*args, **kwargs) on this test's device; records `name` (s, lower is better)."""
        timing = measure(fn, args, kwargs, clock=self._owner._clock(),
                         config=self._owner.timing_config)
        self.record(name, timing.median, unit="s", better="lower", samples=list(timing.samples))
        for warning in timing.warnings:
            self._record.warnings.append(f"{name}: {warning}")
        return timing

    def record_bandwidth(self, name: str, bytes_per_call: float, timing: Timing) -> Metric:
        """Bytes moved per call over the median time: B/s, higher is better."""
        # Per-sample rates keep the significance test usable for the derived metric too.
        return self.record(name, bytes_per_call / timing.median, unit="B/s", better="higher",
                           samples=[bytes_per_call / t for t in timing.samples if t > 0])

    def record_flops(self, name: str, flops_per_call: float, timing: Timing) -> Metric:
        """Floating-point operations per call over the median time: FLOP/s, higher is better."""
        return self.record(name, flops_per_call / timing.median, unit="FLOP/s", better="higher",
                           samples=[flops_per_call / t for t in timing.samples if t > 0])

    def check_close(self, actual: Any, expected: Any, rtol: float | None = None,
                    atol: float | None = None, name: str = "max_rel_error") -> float:
        """Fail with where, how large and how many when out of tolerance; NaN/Inf never pass."""
        result = tolerances.compare(actual, expected, rtol=rtol, atol=atol)
        self.record(name, result.max_rel_error, unit="", better="lower",
                    note="correctness", tolerance=float("inf"))
        if result.message:
            pytest.fail(f"{name}: {result.message}", pytrace=False)
        return result.max_rel_error


class Hpml(Recorder):
    def __init__(self, session: HpmlSession, item: pytest.Item, device: torch.device) -> None:
        self._session = session
        self._item = item
        self.device = device
        self.profile: str = session.profile
        self.interpreted: bool = devices.triton_interpreted()
        self._rows: list[Recorder] = []
        record = Record(
            id=item.nodeid,
            experiment=item.nodeid.split("[", 1)[0],
            params=_callspec_params(item),
            order=_order_key(item),
            device=str(device),
            views=_views(item),
        )
        super().__init__(self, record)
        self.timing_config = self._timing_config()

    # -- the test's view of its configuration -------------------------------------------------
    @property
    def experiment(self) -> str:
        return self._record.experiment

    @experiment.setter
    def experiment(self, title: str) -> None:
        self._record.experiment = title
        for row in self._rows:
            row.record_data.experiment = title

    @property
    def ceilings(self) -> Ceilings:
        return self._session.ceilings_for(self.device, self._clock)

    def plot_path(self, filename: str) -> Path | None:
        return self._session.plot_path(filename)

    @contextlib.contextmanager
    def row(self, **columns: Any) -> Iterator[Recorder]:
        """A further row of this test's table (one per layer, per step ...)."""
        suffix = ",".join(f"{k}={v}" for k, v in columns.items())
        record = Record(
            id=f"{self._record.id}[{suffix}]" if "[" not in self._record.id
            else f"{self._record.id[:-1]}-{suffix}]",
            experiment=self._record.experiment,
            params={**self._record.params, **columns},
            order=[*self._record.order, len(self._rows) + 1],
            device=self._record.device,
            views=self._record.views,
        )
        recorder = Recorder(self, record)
        self._rows.append(recorder)
        yield recorder

    def records(self) -> list[Record]:
        # The test's own row only counts when something was recorded in it.
        own = [self._record] if self._record.metrics else []
        return own + [r.record_data for r in self._rows if r.record_data.metrics]

    # -- internals -----------------------------------------------------------------------------
    def _marker_option(self, name: str) -> Any:
        for marker in self._item.iter_markers("hpml"):
            if name in marker.kwargs:
                return marker.kwargs[name]
        return None

    def _timing_config(self) -> TimingConfig:
        values = dict(self._session.timing_defaults)
        allowed = set(TimingConfig.__dataclass_fields__)
        for marker in reversed(list(self._item.iter_markers("hpml"))):
            unknown = set(marker.kwargs) - allowed - {"tolerance"}
            if unknown:
                # A readable error on this test, not a traceback into the plugin.
                pytest.fail(
                    f"{self._item.nodeid}: unknown @pytest.mark.hpml option(s) "
                    f"{sorted(unknown)}; known: {sorted(allowed | {'tolerance'})}",
                    pytrace=False,
                )
            values.update({k: v for k, v in marker.kwargs.items() if k in allowed})
        try:
            return TimingConfig(**values)
        except ValueError as exc:
            pytest.fail(f"{self._item.nodeid}: @pytest.mark.hpml: {exc}", pytrace=False)

    def _clock(self) -> Clock:
        if self.device.type != "cuda":
            return CpuClock()
        return cuda_clock(self.device, cold_l2=self.timing_config.cold_l2)


def cuda_clock(device: torch.device, cold_l2: bool = False) -> CudaClock:  # pragma: no cover
    """The real CUDA clock. Never run on the development machine (no GPU there)."""
    props = torch.cuda.get_device_properties(device)
    flush = None
    if cold_l2:
        l2 = getattr(props, "L2_cache_size", 64 * 2**20)
        scratch = torch.empty(2 * l2 // 4, dtype=torch.int32, device=device)
        flush = scratch.zero_
    # torch.cuda._sleep spins for a number of GPU cycles; clock_rate is in kHz.
    cycles_per_second = getattr(props, "clock_rate", 2_000_000) * 1e3
    return CudaClock(
        event_factory=lambda: torch.cuda.Event(enable_timing=True),
        synchronize=lambda: torch.cuda.synchronize(device),
        flush_l2=flush,
        device=str(device),
        busy_wait=lambda seconds: torch.cuda._sleep(int(seconds * cycles_per_second)),
    )


def _callspec_params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec else {}


def _order_key(item: pytest.Item) -> list[Any]:
    """File, line, then parameter indices: the same order in every xdist worker."""
    path, line, _ = item.location
    callspec = getattr(item, "callspec", None)
    indices = [callspec.indices[k] for k in callspec.params] if callspec else []
    return [path, line or 0, *indices, 0]


def _views(item: pytest.Item) -> dict[str, Any]:
    views: dict[str, Any] = {}
    pivot = item.get_closest_marker("hpml_pivot")
    if pivot:
        views["pivot"] = dict(pivot.kwargs)
    plots = []
    for marker in item.iter_markers("hpml_plot"):
        if not marker.args:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.hpml_plot needs a file name, "
                                    "e.g. hpml_plot('times.png', x='k', y='time')")
        plots.append({"filename": marker.args[0], **marker.kwargs})
    if plots:
        views["plots"] = plots
    return views
