"""The records' way from a test to the files (a pytest plugin module): when a test's call
report is made, the records its `hpml` fixture (pytest_hpml.fixture) made are judged (the
pytest_hpml_judge hook: the comparisons fill verdicts). In an xdist worker they are put on the
report as plain data (report.hpml_records), which pytest-xdist serializes to the controller
with the report; in the process that writes the files they are handed over as they are, beside
the report. Either way the controller alone gathers every record and writes every file,
whether the tests ran in it or in workers.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from pytest_hpml import progress
from pytest_hpml.fixture import fixture_of
from pytest_hpml.results import Record
from pytest_hpml.session import HpmlRun, is_controller, run_of, writes_outputs

#: The judged records of the call report just made, by node id, in a process that collects
#: them itself (no xdist worker between): taken by RecordCollector as the report is logged.
_JUDGED = pytest.StashKey[dict[str, list[Record]]]()


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
        if records and not is_controller(item.config):  # an xdist worker
            # Judged before they are serialized: the verdicts travel with the records.
            report.hpml_records = [r.to_dict() for r in records]
        elif records and writes_outputs(item.config):
            # This process collects them: handed over as they are (a 10 000-row sweep's
            # records and verdicts took 0.2 s to write out and read back), beside the report,
            # not on it, as a report-log plugin writes the report's attributes as JSON.
            item.config.stash.setdefault(_JUDGED, {})[report.nodeid] = records
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

    def __init__(self, run: HpmlRun, config: pytest.Config) -> None:
        self.run = run
        self.config = config
        self.ids_of: dict[str, list[str]] = {}  # test nodeid -> the ids of its records
        self.made_by: dict[str, str] = {}  # record id -> the test that made it

    @pytest.hookimpl(tryfirst=True)  # the outcome is settled before the terminal counts it
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "call":
            self.run.ran += 1
        records = self._records_of(report) if report.when == "call" else None
        if records:
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

    def _records_of(self, report: pytest.TestReport) -> list[Record] | None:
        """The records of a call report: handed over in this process, or as data on the
        report of an xdist worker."""
        here = self.config.stash.get(_JUDGED, {}).pop(report.nodeid, None)
        if here is not None:
            return here
        data = getattr(report, "hpml_records", None)
        return [Record.from_dict(d) for d in data] if data else None

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
        config.pluginmanager.register(RecordCollector(run_of(config), config),
                                      f"hpml-records-{id(config)}")
