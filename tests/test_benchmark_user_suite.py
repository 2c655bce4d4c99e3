"""tools/benchmark_user_suite, a project's own suite written for pytest-benchmark (its options in
addopts, its own `device` fixture, groups, same-named tests in two files, bool extra_info,
object parameters, a bimodal benchmark), runs unchanged under either plugin; and how
tools/verdict_user_suite reads which tests a compare failed."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hpml_testing import ROOT

SUITE = ROOT / "tools" / "benchmark_user_suite"
TESTS = 8  # json 2, pickle 2, tensors 3 (two ops and a sum), bimodal 1


def _run(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--rootdir", str(folder), *args], cwd=folder, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    return Path(shutil.copytree(SUITE, tmp_path / "suite"))


def test_it_runs_unchanged_under_pytest_hpml(suite: Path) -> None:
    done = _run(suite, "-p", "no:benchmark", "--hpml-max-time=0.05")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{TESTS} passed" in done.stdout
    # The table pytest-benchmark users expect, grouped as its addopts say; the project's own
    # device fixture (its tests assert the CPU) is not parametrized by the plugin.
    assert "hpml summary" in done.stdout and "unrecognized arguments" not in done.stderr
    assert "test_json_codec.py::test_encode" in done.stdout
    assert "test_pickle_codec.py::test_encode" in done.stdout
    assert "[cuda]" not in done.stdout


def test_it_is_a_pytest_benchmark_suite(suite: Path) -> None:
    pytest.importorskip("pytest_benchmark")
    done = _run(suite, "-p", "no:hpml", "--benchmark-disable")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{TESTS} passed" in done.stdout


def test_the_failed_tests_of_either_tools_compare(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tools"))  # as when a tool of tools/ runs
    spec = importlib.util.spec_from_file_location("verdict_user_suite",
                                                  ROOT / "tools" / "verdict_user_suite.py")
    tool = importlib.util.module_from_spec(spec)
    sys.modules["verdict_user_suite"] = tool  # its dataclasses look their module up
    spec.loader.exec_module(tool)
    hpml = "FAILED test_bimodal.py::test_bimodal - Failed: time regressed\n"
    benchmark = ("Performance has regressed:\n\ttest_bimodal (0001_base) - Field 'median' has "
                 "failed PercentageRegressionCheck: 144.5 > 10.0\n")
    assert tool.failed_tests(hpml) == ["test_bimodal.py::test_bimodal"]
    assert tool.failed_tests(benchmark) == ["test_bimodal"]
    assert tool.failed_tests("8 passed in 9.1s\n") == []
