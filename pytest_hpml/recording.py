"""The records' way from a test to the files (a pytest plugin module): when a test's call
report is made, the records its `hpml` fixture (pytest_hpml.fixture) made are judged (the
pytest_hpml_judge hook: the comparisons fill verdicts) and put on the report as plain data
(report.hpml_records); pytest-xdist serializes it to the controller with the report, so the
controller alone gathers every record and writes every file, whether the tests ran in it or
in workers.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_hpml import progress
from pytest_hpml.fixture import fixture_of
from pytest_hpml.results import Record
from pytest_hpml.session import HpmlRun, run_of, writes_outputs


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Generator:
    report = yield
    if call.when == "call":
        fixture = fixture_of(item)
        # Every test is judged, one that made no records too: the baseline may hold rows of
        # it that it no longer makes.
        records = _readable(fixture.records(), report) if fixture is not None else []
        item.ihook.pytest_hpml_judge(item=item, report=report, records=records)
        said = progress.take(item.config)  # an xdist worker's slow fresh processes
        if said:
            report.hpml_progress = said
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
        self.made_by: dict[str, str] = {}  # record id -> the test that made it

    @pytest.hookimpl(tryfirst=True)  # the outcome is settled before the terminal counts it
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "hpml_records", None)
        if report.when == "call":
            self.run.ran += 1
        if data and report.when == "call":
            records = [Record.from_dict(d) for d in data]
            self._refuse_shared_ids(report, records)
            self.run.records.extend(records)
            self.ids_of[report.nodeid] = [r.id for r in records]
            # A wrong result, a regression, or an expected failure (xfail: it ran broken, or
            # an xpass) must not become the next run's baseline.
            if not report.passed or hasattr(report, "wasxfail"):
                self.run.failed_ids.update(r.id for r in records)
        elif report.when == "teardown" and report.failed:
            # A fixture that fails in teardown: the test did not pass.
            self.run.failed_ids.update(self.ids_of.get(report.nodeid, []))


    def _refuse_shared_ids(self, report: pytest.TestReport, records: list[Record]) -> None:
        """Two tests that make one record id (case "p" with hpml.row(x=1) and case "p-x=1"
        are both test_a[p-x=1]) would be saved as one row and compared with each other: the
        later test fails, and neither row is saved."""
        shared = []
        for r in records:
            first = self.made_by.setdefault(r.id, report.nodeid)
            if first != report.nodeid:
                shared.append(f"{r.id} is also made by {first}")
                self.run.failed_ids.add(r.id)
        if shared:
            report.outcome = "failed"
            report.longrepr = ("hpml: a row's id is another test's too (a baseline keys its rows "
                               "by id): " + "; ".join(shared) + "; name the case's id or the "
                               "row's columns apart (pytest.param(..., id=...))")


def pytest_configure(config: pytest.Config) -> None:
    if writes_outputs(config):
        config.pluginmanager.register(RecordCollector(run_of(config)),
                                      f"hpml-records-{id(config)}")
