"""The `hpml` fixture and the transport of its records (a pytest plugin module).

Each test gets an Hpml (pytest_hpml.fixture) built from the test's item: its context (device,
profile, timing policy, tolerance) and its first row (id, parameters, markers). When the call
report is made, the records are judged (the pytest_hpml_judge hook: comparing fills verdicts)
and put on the report as plain data (report.hpml_records): pytest-xdist serializes it to the
controller with the report, so the controller alone gathers every record and writes every
file, whether the tests ran in it or in workers.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from pytest_hpml.devices import triton_interpreted
from pytest_hpml.fixture import Hpml
from pytest_hpml.policy import marker_options, plain_run, timing_config
from pytest_hpml.recorder import HpmlContext
from pytest_hpml.report.plots import CHART_KINDS
from pytest_hpml.results import Record
from pytest_hpml.selection import profile_of
from pytest_hpml.session import HpmlRun, is_controller, run_of

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
    fixture = Hpml(context, record, plots=config.option.hpml_plots,
                   say=run_of(config).say_once)
    item.stash[FIXTURE_KEY] = fixture
    return fixture


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    report = yield
    if call.when == "call":
        fixture = fixture_of(item)
        # Every test is judged, one that made no records too: the baseline may hold rows of
        # it that it no longer makes.
        records = _readable(fixture.records(), report) if fixture is not None else []
        item.ihook.pytest_hpml_judge(item=item, report=report, records=records)
        if records:
            # Judged before they are serialized: the verdicts travel with the records.
            report.hpml_records = [r.to_dict() for r in records]
    return report


def _readable(records: list[Record], report: pytest.TestReport) -> list[Record]:
    """The records as the controller will read them back. A metric changed after it was
    recorded (a negative time set on the Metric hpml.record returned) fails its test here,
    naming it, instead of stopping the controller or reaching a baseline."""
    readable, problems = [], []
    for record in records:
        try:
            readable.append(Record.from_dict(record.to_dict()))
        except (TypeError, ValueError) as exc:
            problems.append(f"{record.id}: {exc}")
    if problems and not report.failed:
        report.outcome = "failed"
        report.longrepr = "hpml: a recorded metric cannot be stored:\n  " + "\n  ".join(problems)
    return readable


class RecordCollector:
    """Gathers records from call reports: local ones, or the workers' ones under xdist; and
    which tests did not pass, whose rows are never saved."""

    def __init__(self, run: HpmlRun) -> None:
        self.run = run
        self.ids_of: dict[str, list[str]] = {}  # test nodeid -> the ids of its records

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "hpml_records", None)
        if report.when == "call":
            self.run.ran += 1
        if data and report.when == "call":
            records = [Record.from_dict(d) for d in data]
            self.run.records.extend(records)
            self.ids_of[report.nodeid] = [r.id for r in records]
            # A wrong result, a regression, or an expected failure (xfail: it ran broken, or
            # an xpass) must not become the next run's baseline.
            if not report.passed or hasattr(report, "wasxfail"):
                self.run.failed_ids.update(r.id for r in records)
        elif report.when == "teardown" and report.failed:
            # A fixture that fails in teardown: the test did not pass.
            self.run.failed_ids.update(self.ids_of.get(report.nodeid, []))


def pytest_configure(config: pytest.Config) -> None:
    if is_controller(config):
        config.pluginmanager.register(RecordCollector(run_of(config)),
                                      f"hpml-records-{id(config)}")


# -- the first row of a test, from its item --------------------------------------------------------

def _callspec_params(item: pytest.Item) -> dict[str, Any]:
    callspec = getattr(item, "callspec", None)
    return dict(callspec.params) if callspec else {}


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
