"""The `hpml` fixture (a pytest plugin module): its object, Hpml, holds the Recorder of the
test's own row, further rows of the test's table, and the test's context (see docs/API.md);
the fixture function builds one per test from the test's item: its context (device, profile,
timing policy, tolerance) and its first row (id, parameters, markers). pytest_hpml.recording
takes its records to the controller.

Importing this module imports no torch: plain tests in a repository that installs the plugin
stay fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.devices import triton_interpreted
from pytest_hpml.policy import marker_options, plain_run, timing_config
from pytest_hpml.recorder import HpmlContext, Recorder
from pytest_hpml.report.plots import CHART_KINDS, plot_path
from pytest_hpml.results import Record
from pytest_hpml.selection import profile_of
from pytest_hpml.session import run_of

if TYPE_CHECKING:
    import torch

    from pytest_hpml.measure.ceilings import Ceilings
    from pytest_hpml.measure.timing import TimingConfig


class _OwnRow:
    """A Recorder method reached through the fixture: it records in the test's own row."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, fixture: Hpml | None, owner: type | None = None) -> Any:
        if fixture is None:
            return getattr(Recorder, self.name)  # help(Hpml.record) shows Recorder.record
        return getattr(fixture.own_row, self.name)


class Hpml:
    """The `hpml` fixture: the recording API of the test's own row (a Recorder), further rows
    (`row`), and the test's context."""

    # The Recorder API, on the test's own row.
    param = _OwnRow()
    metric = _OwnRow()
    annotate = _OwnRow()
    expect_missing = _OwnRow()
    record = _OwnRow()
    time = _OwnRow()
    record_timing = _OwnRow()
    record_bandwidth = _OwnRow()
    record_flops = _OwnRow()
    compile_kernel = _OwnRow()
    reference = _OwnRow()
    setting = _OwnRow()
    check = _OwnRow()
    check_close = _OwnRow()
    catch_out_of_memory = _OwnRow()
    sample_utilization = _OwnRow()

    def __init__(self, context: HpmlContext, record: Record, plots: str | Path | None = None,
                 say: Callable[[str], None] | None = None,
                 wanted: frozenset[str] | None = None) -> None:
        self.context = context
        self._wanted = wanted  # the rows a confirming process makes (None: every row)
        #: The Recorder of the test's own row.
        self.own_row = Recorder(context, record)
        self._rows: list[Recorder] = []
        self._row_ids: set[str] = set()  # their ids: a sweep of 10k rows checks each in O(1)
        self._plots = plots
        self._say = say
        self._device: torch.device | None = None

    @property
    def device_name(self) -> str:
        """"cpu" or "cuda": the `device` parameter's case (cpu without one)."""
        return self.context.device

    @property
    def device(self) -> torch.device:
        """torch.device of this test (imported on first use: plain tests never load torch)."""
        if self._device is None:
            import torch

            self._device = torch.device(self.context.device)
        return self._device

    @property
    def profile(self) -> str:
        return self.context.profile

    @property
    def timing_config(self) -> TimingConfig:
        """The sampling policy of this test (profile, command line, @pytest.mark.hpml)."""
        return self.context.timing

    @property
    def interpreted(self) -> bool:
        """Whether Triton kernels run in its interpreter (no GPU): not performance figures."""
        return self.context.interpreted

    @property
    def ceilings(self) -> Ceilings:
        """This device's measured copy bandwidth and matmul FLOP/s, once per process."""
        return self.context.ceilings

    @property
    def experiment(self) -> str:
        """The table title; rows of several tests with the same title share one table."""
        return self.own_row._record.experiment

    @experiment.setter
    def experiment(self, title: str) -> None:
        for recorder in (self.own_row, *self._rows):
            recorder._record.experiment = title

    def plot_path(self, filename: str) -> Path | None:
        """Where to write a chart of this test's own; None without --hpml-plots or matplotlib."""
        return plot_path(self._plots, filename, self._say)

    def _row_id(self, columns: dict[str, Any]) -> tuple[str, str]:
        """The id of the row with these columns, and the columns in words."""
        suffix = ",".join(f"{k}={v}" for k, v in columns.items())
        own = self.own_row._record.id
        return (f"{own}[{suffix}]" if "[" not in own else f"{own[:-1]}-{suffix}]"), suffix

    def wants(self, **columns: Any) -> bool:
        """Whether this process needs the row with these columns (none: the test's own row):
        always in a run of its own; in a fresh process that confirms some rows of the test,
        only for those and the rows the run made just before each (rerun.warm_up: measured
        first and dropped, so that no suspect is a cold process's first call). A sweep that
        asks before it measures a row
        (`if not hpml.wants(size=n): continue`) has a confirmation measure the rows it
        confirms, not the whole sweep again."""
        if self._wanted is None:
            return True
        return (self._row_id(columns)[0] if columns else self.own_row._record.id) \
            in self._wanted

    @contextlib.contextmanager
    def row(self, **columns: Any) -> Iterator[Recorder]:
        """A further row of this test's table (one per layer, per step ...)."""
        own = self.own_row._record
        row_id, suffix = self._row_id(columns)
        if row_id in self._row_ids:
            # Rows are told apart by their columns: two with the same ones would share one
            # baseline entry, and the second would overwrite the first.
            raise ValueError(f"hpml.row({suffix}) twice in {own.id}: a row is known by its "
                             "columns; add a column whose value differs (e.g. step=...)")
        record = Record(
            id=row_id,
            experiment=own.experiment,
            params={**own.params, **columns},
            order=[*own.order, len(self._rows) + 1],
            device=own.device,
            views=own.views,
            expected_missing=list(own.expected_missing),
            test=own.test,
        )
        recorder = Recorder(self.context, record)
        self._rows.append(recorder)
        self._row_ids.add(row_id)
        yield recorder

    def records(self) -> list[Record]:
        if self.context.disabled:
            return []  # --hpml-disable: a plain test, nothing reported, compared or saved
        # The test's own row only counts when something was recorded in it.
        own = [self.own_row._record] if self.own_row._record.metrics else []
        return own + [r._record for r in self._rows if r._record.metrics]


# -- the fixture ---------------------------------------------------------------------------------

FIXTURE_KEY = pytest.StashKey[Hpml]()


def fixture_of(item: pytest.Item) -> Hpml | None:
    """The hpml fixture a test used, if it used one."""
    return item.stash.get(FIXTURE_KEY, None)


@pytest.fixture
def hpml(request: pytest.FixtureRequest) -> Hpml:
    """Time, record and check one experiment (see docs/API.md)."""
    item, config = request.node, request.config
    callspec = getattr(item, "callspec", None)
    device = "cuda" if callspec and callspec.params.get("device") == "cuda" else "cpu"
    profile = profile_of(config)
    context = HpmlContext(device=device, profile=profile,
                          timing=timing_config(item, profile),
                          tolerance=marker_options(item).get("tolerance"),
                          interpreted=triton_interpreted(), disabled=plain_run(config))
    record = Record(
        id=item.nodeid,
        experiment=item.nodeid.split("[", 1)[0],
        params=_callspec_params(item),
        order=_order_key(item),
        device=device,
        views=_views(item),
        expected_missing=_expected_missing(item),
        test=item.nodeid,
    )
    run = run_of(config)
    fixture = Hpml(context, record, plots=config.option.hpml_plots, say=run.say_once,
                   wanted=run.rows_wanted.get(item.nodeid))
    item.stash[FIXTURE_KEY] = fixture
    return fixture


# -- the first row of a test, from its item --------------------------------------------------------

def _callspec_params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    if not callspec:
        return {}
    return {name: _shown(name, value, callspec) for name, value in callspec.params.items()}


def _shown(name: str, value: Any, callspec: Any) -> Any:
    """A parameter as the report shows it: its value, or where its str() is a repr
    ("<class 'x.BaseConverter'>", "<... object at 0x7f...>") the id pytest gave it, which is
    what users know from the test ids."""
    if not str(value).startswith("<"):
        return value
    ids = getattr(callspec, "_idlist", None)  # one per parametrize call (pytest's own)
    if ids and len(ids) == len(callspec.params):
        return ids[list(callspec.params).index(name)]
    return getattr(value, "__name__", None) or f"{name}{callspec.indices[name]}"


def _order_key(item: pytest.Item) -> list[Any]:
    """File, line, then parameter indices: the same order in every xdist worker."""
    path, line, _ = item.location
    callspec = getattr(item, "callspec", None)
    indices = [callspec.indices[k] for k in callspec.params] if callspec else []
    return [path, line or 0, *indices, 0]


def _expected_missing(item: pytest.Item) -> list[str]:
    names = marker_options(item).get("expect_missing", [])
    return ["*"] if names == "*" else list(names)


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
        kind = marker.kwargs.get("kind", "line")
        if kind not in CHART_KINDS:
            raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.hpml_plot(kind={kind!r}): "
                                    f"kind is one of {', '.join(CHART_KINDS)}")
        plots.append({"filename": marker.args[0], **marker.kwargs})
    if plots:
        views["plots"] = plots
    return views
