"""The `hpml` fixture and the transport of its records (a pytest plugin module).

Records travel as plain data on the call report (report.hpml_records): pytest-xdist serializes
it to the controller with the report, so the controller alone gathers every record and writes
every file, whether the tests ran in it or in workers.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import pytest

from pytest_hpml.results import Record
from pytest_hpml.session import FIXTURE_KEY, HpmlRun, fixture_of, is_controller, run_of

if TYPE_CHECKING:
    from pytest_hpml.fixture import Hpml


@pytest.fixture
def hpml(request: pytest.FixtureRequest) -> Hpml:
    """Time, record and check one experiment (see docs/API.md)."""
    from pytest_hpml.fixture import Hpml

    callspec = getattr(request.node, "callspec", None)
    name = callspec.params.get("device") if callspec else None
    fixture = Hpml(run_of(request.config), request.node, "cuda" if name == "cuda" else "cpu")
    request.node.stash[FIXTURE_KEY] = fixture
    return fixture


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    # Outermost wrapper: the comparison (an inner wrapper) has filled the verdicts by the time
    # the records are put on the report.
    report = yield
    fixture = fixture_of(item)
    if call.when == "call" and fixture is not None:
        report.hpml_records = [r.to_dict() for r in fixture.records()]
    return report


class RecordCollector:
    """Gathers records from call reports: local ones, or the workers' ones under xdist."""

    def __init__(self, run: HpmlRun) -> None:
        self.run = run

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "hpml_records", None)
        if data and report.when == "call":
            records = [Record.from_dict(d) for d in data]
            self.run.records.extend(records)
            if report.failed:
                # A wrong result or a regression must not become the next run's baseline.
                self.run.failed_ids.update(r.id for r in records)


def pytest_configure(config: pytest.Config) -> None:
    if is_controller(config):
        config.pluginmanager.register(RecordCollector(run_of(config)),
                                      f"hpml-records-{id(config)}")
