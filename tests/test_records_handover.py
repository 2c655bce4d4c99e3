"""How a test's judged records reach the process that writes the files (recording.py): as they
are, beside the call report, where that process ran the test; as data on the report from an
xdist worker. Either way every row arrives with its verdicts, and the report itself stays what
a report-log plugin can write as JSON."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST

SUITE = """
def test_sweep(hpml):
    for i in range(3):
        with hpml.row(size=i) as row:
            row.record("time", 1.0 + i, unit="s", better="lower")


def test_one(hpml):
    hpml.record("work", 2.0, unit="s", better="lower")
"""

#: Serializes every report as pytest-reportlog does (the hook, then json.dumps), into a file.
REPORT_LOG = """
import json
import pathlib


def pytest_runtest_logreport(report):
    config = pytest_runtest_logreport.config
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    data.pop("node", None)  # the worker an xdist controller's report came from
    with pathlib.Path("reports.jsonl").open("a") as log:
        log.write(json.dumps(data) + "\\n")


def pytest_configure(config):
    pytest_runtest_logreport.config = config
"""


def _rows(pytester: pytest.Pytester, *args: str) -> dict[str, dict]:
    out = pytester.path / "report.json"
    result = pytester.runpytest_subprocess(*FAST, f"--hpml-report={out}", *args)
    result.assert_outcomes(passed=2)
    return {r["id"]: r for r in json.loads(out.read_text())["records"]}


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "xdist"])
def test_every_row_arrives_with_its_verdicts(pytester: pytest.Pytester,
                                             workers: list[str]) -> None:
    pytester.makepyfile(test_rows=SUITE)
    pytester.makeconftest(REPORT_LOG)
    _rows(pytester, "--hpml-save-baseline", "--hpml-baselines=bl", *workers)
    rows = _rows(pytester, "--hpml-compare", "--hpml-baselines=bl", *workers)
    assert sorted(rows) == ["test_rows.py::test_one", *(f"test_rows.py::test_sweep[size={i}]"
                                                       for i in range(3))]
    assert all(r["verdicts"][m["name"]]["outcome"] == "unchanged"
               for r in rows.values() for m in r["metrics"])
    # Every report was written as JSON; a call report of this process carries no records
    # (they were handed over beside it), one from a worker carries them as data.
    logged = [json.loads(line) for line in
              (pytester.path / "reports.jsonl").read_text().splitlines()]
    calls = [d for d in logged if d.get("when") == "call"]
    # Two tests, in the save and in the compare; under xdist each call report is logged by
    # the worker that made it and again by the controller that received it.
    assert len(calls) == 2 * 2 * (2 if workers else 1)
    assert all(("hpml_records" in d) == bool(workers) for d in calls)
