"""Exports for CI dashboards: github-action-benchmark custom JSON and Bencher's BMF."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST

from pytest_hpml.report.exports import bencher_bmf, benchmark_action
from pytest_hpml.results import Metric, Record, Replicates, Verdict

EXPERIMENT = """
    import pytest

    @pytest.mark.parametrize("n", [1, 2])
    def test_kernel(hpml, n):
        hpml.record("time", 2e-3 * n, unit="s", better="lower", samples=[1e-3 * n, 3e-3 * n])
        hpml.record("bandwidth", 5e11 * n, unit="B/s", better="higher")
        hpml.record("parameters", 42, better=None)  # no direction: not a benchmark series
"""


SAMPLES = [0.9e-3, 1.0e-3, 1.1e-3, 1.2e-3, 0.8e-3, 1.0e-3, 1.05e-3, 0.95e-3, 1.0e-3]
NOTCH = 1.57 * (1.05e-3 - 0.95e-3) / 3 / 1.0e-3  # 1.57 IQR / sqrt(n), relative to the median


def test_benchmark_action_files(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-export-benchmark-action=ci/bench.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["hpml: wrote ci/bench.json", "hpml: wrote ci/bench-bigger.json"])
    smaller = json.loads((pytester.path / "ci" / "bench.json").read_text())
    bigger = json.loads((pytester.path / "ci" / "bench-bigger.json").read_text())
    # Two samples are too few for a notch: no range.
    assert smaller == [
        {"name": "test_k.py::test_kernel[1] :: time", "unit": "s", "value": 2e-3, "extra": "n=1"},
        {"name": "test_k.py::test_kernel[2] :: time", "unit": "s", "value": 4e-3, "extra": "n=2"},
    ]
    # One unit per series, whatever the value: 500 GB/s and 1 TB/s are both B/s.
    assert [(e["name"], e["unit"], e["value"]) for e in bigger] == [
        ("test_k.py::test_kernel[1] :: bandwidth", "B/s", 5e11),
        ("test_k.py::test_kernel[2] :: bandwidth", "B/s", 1e12),
    ]


def test_a_series_keeps_its_unit_across_runs() -> None:
    # 0.99e12 B/s printed as 990 GB/s and 1.01e12 as 1.01 TB/s would be a 1000x cliff on a
    # dashboard that does not convert units.
    units = {benchmark_action([Record("t", "E", {}, [Metric("bw", v, "B/s", "higher")])])[
        "customBiggerIsBetter"][0]["unit"] for v in (0.99e12, 1.01e12)}
    times = {benchmark_action([Record("t", "E", {}, [Metric("t", v, "s", "lower")])])[
        "customSmallerIsBetter"][0]["unit"] for v in (9.9e-4, 1.01e-3)}
    assert units == {"B/s"} and times == {"s"}


def test_the_point_is_the_verdicts_value_and_its_range_the_notch() -> None:
    # The test's process measured 1.0 ms; two fresh processes 1.2 and 1.3 ms: the verdict
    # rests on their median, and so does the dashboard.
    metric = Metric("time", 1.0e-3, "s", "lower", samples=SAMPLES)
    record = Record("t", "E", {}, [metric],
                    replicates={"time": Replicates((1.0e-3, 1.2e-3, 1.3e-3))})
    [entry] = benchmark_action([record])["customSmallerIsBetter"]
    assert entry["value"] == pytest.approx(1.2e-3)
    assert entry["range"] == f"± {NOTCH * 1.2e-3:.4g}"  # not the IQR of single samples
    bmf = bencher_bmf([record])["t"]["time (s)"]
    assert bmf["value"] == pytest.approx(1.2e-3)
    assert bmf["lower_value"] == pytest.approx(1.2e-3 * (1 - NOTCH))
    assert bmf["upper_value"] == pytest.approx(1.2e-3 * (1 + NOTCH))


def test_missing_metrics_are_not_exported() -> None:
    gone = Record("t", "E", {}, [], verdicts={"time": Verdict("missing", unit="s",
                                                             baseline=1.0)})
    assert benchmark_action([gone]) == {"customSmallerIsBetter": [], "customBiggerIsBetter": []}
    assert bencher_bmf([gone]) == {}


def test_bencher_export(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_k=EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-export-bencher=bmf.json")
    result.assert_outcomes(passed=2)
    bmf = json.loads((pytester.path / "bmf.json").read_text())
    assert bmf["test_k.py::test_kernel[1]"] == {
        "time (s)": {"value": 2e-3},
        "bandwidth (B/s)": {"value": 5e11},
        "parameters": {"value": 42.0},
    }
    assert set(bmf) == {"test_k.py::test_kernel[1]", "test_k.py::test_kernel[2]"}


def test_only_files_with_entries_are_written_and_the_run_says_so(pytester: pytest.Pytester
                                                                  ) -> None:
    pytester.makepyfile("def test_t(hpml):\n    hpml.time(sum, range(1000))\n")
    result = pytester.runpytest(*FAST, "--hpml-export-benchmark-action=b.json")
    result.assert_outcomes(passed=1)
    [entry] = json.loads((pytester.path / "b.json").read_text())
    assert entry["name"] == "test_only_files_with_entries_are_written_and_the_run_says_so.py" \
        "::test_t :: time"
    assert entry["unit"] == "s" and entry["value"] > 0 and entry["range"].startswith("± ")
    # github-action-benchmark fails on an empty list: no bigger-is-better file at all.
    assert not (pytester.path / "b-bigger.json").exists()
    result.stdout.fnmatch_lines(["hpml: github-action-benchmark: no bigger-is-better metric in "
                                 "this run, so *b-bigger.json was not written",
                                 "hpml: wrote b.json"])


def test_correctness_errors_are_not_exported_as_benchmarks() -> None:
    error = Metric("max_rel_error", 1e-7, "", "lower", kind="check")
    published = Metric("published_time", 1e-3, "s", "lower", kind="reference", source="a paper")
    batch = Metric("batch", 128, kind="setting")
    time = Metric("time", 2e-3, "s", "lower")
    records = [Record("t", "E", {}, [error, published, batch, time])]
    exported = benchmark_action(records)
    assert [e["name"] for e in exported["customSmallerIsBetter"]] == ["t :: time"]
    assert list(bencher_bmf(records)["t"]) == ["time (s)"]
