"""Exports for CI dashboards: github-action-benchmark custom JSON and Bencher's BMF."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST

from pytest_hpml.report.exports import bencher_bmf, benchmark_action
from pytest_hpml.results import Metric, Record, Verdict

EXPERIMENT = """
    import pytest

    @pytest.mark.parametrize("n", [1, 2])
    def test_kernel(hpml, n):
        hpml.record("time", 2e-3 * n, unit="s", better="lower", samples=[1e-3 * n, 3e-3 * n])
        hpml.record("bandwidth", 5e11 * n, unit="B/s", better="higher")
        hpml.record("parameters", 42, better=None)  # no direction: not a benchmark series
"""


def test_benchmark_action_files(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-export-benchmark-action=ci/bench.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hpml: wrote ci/bench.json", "hpml: wrote ci/bench-bigger.json"])
    smaller = json.loads((pytester.path / "ci" / "bench.json").read_text())
    bigger = json.loads((pytester.path / "ci" / "bench-bigger.json").read_text())
    assert smaller == [
        # The IQR of the recorded samples becomes the range.
        {"name": "test_k.py::test_kernel[1] :: time", "unit": "ms", "value": 2.0, "range": "± 1",
         "extra": "n=1"},
        {"name": "test_k.py::test_kernel[2] :: time", "unit": "ms", "value": 4.0, "range": "± 2",
         "extra": "n=2"},
    ]
    assert [(e["name"], e["unit"], e["value"]) for e in bigger] == [
        ("test_k.py::test_kernel[1] :: bandwidth", "GB/s", 500.0),
        ("test_k.py::test_kernel[2] :: bandwidth", "TB/s", 1.0),
    ]


def test_benchmark_action_range_from_the_iqr() -> None:
    metric = Metric("time", 2e-3, "s", "lower", iqr=5e-4)
    [entry] = benchmark_action([Record("t", "E", {}, [metric])])["customSmallerIsBetter"]
    assert entry == {"name": "t :: time", "unit": "ms", "value": 2.0, "range": "± 0.5"}


def test_missing_metrics_are_not_exported() -> None:
    gone = Metric("time", float("nan"), "s", "lower", verdict=Verdict("missing", baseline=1.0))
    assert benchmark_action([Record("t", "E", {}, [gone])]) == {
        "customSmallerIsBetter": [], "customBiggerIsBetter": []}
    assert bencher_bmf([Record("t", "E", {}, [gone])]) == {}


def test_bencher_export(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-export-bencher=bmf.json")
    result.assert_outcomes(passed=2)
    bmf = json.loads((pytester.path / "bmf.json").read_text())
    assert bmf["test_k.py::test_kernel[1]"] == {
        "time (s)": {"value": 2e-3, "lower_value": 1e-3, "upper_value": 3e-3},
        "bandwidth (B/s)": {"value": 5e11},
        "parameters": {"value": 42.0},
    }
    assert set(bmf) == {"test_k.py::test_kernel[1]", "test_k.py::test_kernel[2]"}


def test_timings_export_their_spread_as_range(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_t(hpml):\n    hpml.time(sum, range(1000))\n")
    pytester.runpytest(*FAST, "--hpml-export-benchmark-action=b.json").assert_outcomes(passed=1)
    [entry] = json.loads((pytester.path / "b.json").read_text())
    assert entry["name"] == "test_timings_export_their_spread_as_range.py::test_t :: time"
    assert entry["unit"] in ("s", "ms", "us", "ns") and entry["value"] > 0
    assert entry["range"].startswith("± ")
    assert json.loads((pytester.path / "b-bigger.json").read_text()) == []


def test_correctness_errors_are_not_exported_as_benchmarks() -> None:
    error = Metric("max_rel_error", 1e-7, "", "lower", kind="check")
    published = Metric("published_time", 1e-3, "s", "lower", kind="reference", source="a paper")
    batch = Metric("batch", 128, kind="setting")
    time = Metric("time", 2e-3, "s", "lower")
    records = [Record("t", "E", {}, [error, published, batch, time])]
    exported = benchmark_action(records)
    assert [e["name"] for e in exported["customSmallerIsBetter"]] == ["t :: time"]
    assert list(bencher_bmf(records)["t"]) == ["time (s)"]
