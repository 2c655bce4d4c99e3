"""`python -m pytest_hpml compare | show | seed`: the comparison of two saved runs as
--hpml-compare makes it, what a baseline holds, and a baseline seeded from pytest-benchmark."""

from __future__ import annotations

import csv
import io
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from hpml_testing import FAST, HERE, ROOT, baseline_file, run_with_json
from test_benchmark_fixture import CONFTEST, SUITE, outside_xdist
from test_layers import HOOKS, import_graph

from pytest_hpml.cli import main
from pytest_hpml.compare import baselines, engine, seed
from pytest_hpml.report.files import write_report
from pytest_hpml.results import Metric, Record


def _record(test: str, milliseconds: float, seed_: int) -> Record:
    rng = random.Random(seed_)
    samples = [milliseconds * 1e-3 * rng.uniform(0.99, 1.01) for _ in range(30)]
    return Record(id=f"test_x.py::{test}", experiment="test_x.py::" + test, metrics=[
        Metric("time", sorted(samples)[15], "s", "lower", samples=samples)])


def _report(path: Path, **tests: float) -> Path:
    records = [_record(name, ms, i) for i, (name, ms) in enumerate(tests.items())]
    return write_report(path, records, HERE, "quick")


def _run(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return main(list(argv), out), out.getvalue()


def test_compare_gives_the_verdicts_and_fails_on_a_regression(tmp_path: Path) -> None:
    old = _report(tmp_path / "old.json", test_steady=1.0, test_slower=1.0)
    new = _report(tmp_path / "new.json", test_steady=1.0, test_slower=1.5)
    # One process a side: nothing confirms the slowdown (issue 33, item 4), so it is said and
    # fails only where asked.
    code, text = _run("compare", str(old), str(new))
    assert code == 0
    rows = {line.split()[0]: line for line in text.splitlines() if line.startswith("test_")}
    assert "unconfirmed" in rows["test_slower"] and "+50.0%" in rows["test_slower"]
    assert "unchanged" in rows["test_steady"]
    assert "1 unchanged, 1 unconfirmed" in text
    code, text = _run("compare", str(old), str(new), "--fail-unconfirmed")
    assert code == 1
    assert "failed the comparison:\n  test_x.py::test_slower time: " in text
    assert _run("compare", str(old), str(old))[0] == 0


def test_the_processes_of_a_saved_report_count_as_the_runs_of_a_baseline(
        tmp_path: Path) -> None:
    saved = _record("test_a", 1.0, 1)
    # The save's two fresh processes.
    engine.add_processes([saved], [[_record("test_a", 1.3, 1)], [_record("test_a", 1.4, 1)]])
    old = write_report(tmp_path / "old.json", [saved], HERE, "quick")
    new = _report(tmp_path / "new.json", test_a=1.3)
    code, text = _run("compare", str(old), str(new), "--format", "csv")
    row = next(csv.DictReader(io.StringIO(text)))
    assert float(row["baseline"]) == pytest.approx(0.0013, rel=0.02)  # the median of three
    assert row["verdict"] == "unchanged" and code == 0


def test_compare_writes_markdown_and_csv(tmp_path: Path) -> None:
    old = _report(tmp_path / "old.json", test_a=1.0)
    new = _report(tmp_path / "new.json", test_a=2.0)
    code, markdown = _run("compare", str(old), str(new), "--format", "markdown",
                          "--fail-unconfirmed")
    assert code == 1
    assert "## Comparison with baseline" in markdown and "| test_a " in markdown
    assert "## Failed the comparison\n- test_x.py::test_a time:" in markdown
    code, text = _run("compare", str(old), str(new), "--format", "csv", "--fail-unconfirmed")
    assert code == 1
    header, row = text.splitlines()[:2]
    assert header.startswith("experiment,id,params,metric")
    assert ",unconfirmed," in row


def test_compare_reads_baseline_files_and_says_what_is_wrong(tmp_path: Path) -> None:
    old = tmp_path / "base.json"
    baselines.save(old, HERE, "quick", [_record("test_a", 1.0, 1)])
    new = _report(tmp_path / "new.json", test_a=1.0)
    code, text = _run("compare", str(old), str(new))
    assert code == 0 and "pytest-hpml baseline (test-9000-x4cores, profile quick)" in text
    (tmp_path / "junk.json").write_text("{}")
    err = subprocess.run([sys.executable, "-m", "pytest_hpml", "compare", str(tmp_path /
                          "junk.json"), str(new)], capture_output=True, text=True, cwd=ROOT)
    assert err.returncode == 2
    assert "is neither a pytest-hpml JSON report nor a baseline file" in err.stderr


def test_show_lists_tests_metrics_runs_accepted_levels_machine_and_versions(
        tmp_path: Path) -> None:
    path = tmp_path / "base.json"
    for i in range(3):
        baselines.save(path, HERE, "quick", [_record("test_a", 1.0 + i / 100, i)])
    document = json.loads(path.read_text())
    document["records"][0]["metrics"][0]["accepted"] = [
        {"on": "2025-03-04T05:06:07+00:00", "before": 0.002, "after": 0.001}]
    path.write_text(json.dumps(document))
    code, text = _run("show", str(path))
    assert code == 0
    assert "machine: test-9000-x4cores (Test CPU 9000, 4 cores; no GPU)" in text
    assert "versions: torch 2.9.0" in text and "1 test(s), 1 metric(s)" in text
    row = next(line for line in text.splitlines() if line.startswith("test_x.py::test_a"))
    assert row.split()[1] == "time" and " 3 " in row  # three runs kept
    assert "±" in row and "2025-03-04 05:06: 2.000 ms -> 1.000 ms" in row


def test_the_cli_imports_no_hook_module() -> None:
    graph = import_graph()
    reached, pending = set(), ["pytest_hpml.cli"]
    while pending:
        for module in graph.get(pending.pop(), ()):
            if module not in reached:
                reached.add(module)
                pending.append(module)
    assert not reached & HOOKS, sorted(reached & HOOKS)


def test_a_saved_pytest_benchmark_run_seeds_a_baseline_until_hpml_saves_its_own(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    outside_xdist(monkeypatch)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_bench_suite=SUITE)
    pytester.runpytest("-p", "no:cacheprovider", "--benchmark-max-time=0.01",
                       "--benchmark-autosave").assert_outcomes(passed=7)
    folder = pytester.path / "baselines"
    code, text = _run("seed", str(pytester.path / ".benchmarks"), "--baselines", str(folder),
                      "--profile", "quick")
    assert code == 0
    assert text.startswith(f"seeded 7 test(s) into {baseline_file(folder)} from a "
                           "pytest-benchmark ")
    assert "between-run spread is unknown until pytest-hpml has saved its own runs" in text
    stored = {r["id"]: r["metrics"][0] for r in json.loads(baseline_file(folder).read_text())[
        "records"]}
    assert stored["test_bench_suite.py::test_call_form"]["seeded_from"].startswith(
        "a pytest-benchmark ")
    assert "unknown (seeded)" in _run("show", str(baseline_file(folder)))[1]

    # The first comparison rests on the seed, and every verdict says so.
    result, document = run_with_json(pytester, "-p", "no:benchmark", "--hpml-compare",
                                     f"--hpml-baselines={folder}", "--hpml-confirm=0")
    assert "hpml: --hpml-compare: the baseline is a pytest-benchmark " in result.stdout.str()
    bases = [r["verdicts"]["time"]["basis"] for r in document["records"]]
    assert len(bases) == 7
    assert all("the baseline is a pytest-benchmark" in b and "its between-run spread is "
               "unknown until pytest-hpml has saved its own runs" in b for b in bases)

    # pytest-hpml's own save replaces the seed: its history starts with its own runs.
    pytester.runpytest(*FAST, "-p", "no:benchmark", "--hpml-save-baseline",
                       f"--hpml-baselines={folder}").assert_outcomes(passed=7)
    resaved = json.loads(baseline_file(folder).read_text())["records"]
    assert all("seeded_from" not in m and len(m["history"]) == 1
               for r in resaved for m in r["metrics"])
    code, text = _run("seed", str(pytester.path / ".benchmarks"), "--baselines", str(folder),
                      "--profile", "quick")
    assert "seeded 0 test(s)" in text and "kept 7 test(s)" in text


def test_a_storage_folder_with_several_machines_needs_one_named(tmp_path: Path) -> None:
    for machine, runs in (("Linux-CPython-3.11-64bit", ["0001_a.json", "0002_b.json"]),
                          ("Darwin-CPython-3.12-64bit", ["0001_c.json"])):
        (tmp_path / machine).mkdir()
        for run in runs:
            (tmp_path / machine / run).write_text("{}")
    with pytest.raises(seed.NotPytestBenchmark, match="runs of 2 machines"):
        seed.saved_run(tmp_path)
    assert seed.saved_run(tmp_path / "Linux-CPython-3.11-64bit").name == "0002_b.json"
