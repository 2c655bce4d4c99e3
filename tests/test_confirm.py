"""Confirmation reruns: which options travel to the fresh processes, and the processes
themselves (forked from a forkserver that has imported pytest and torch once)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hpml_testing import FAST, only_baseline_file

from pytest_hpml import comparing as comparing_module
from pytest_hpml import reporting as reporting_module
from pytest_hpml import selection as selection_module
from pytest_hpml import session as session_module
from pytest_hpml.compare import confirm

# -- issue 21 case 3, issue 19 item 6: a rerun is the run's own command for one node id ----------

def _item(config: pytest.Config, nodeid: str) -> SimpleNamespace:
    path = config.rootpath / nodeid.split("::")[0]
    return SimpleNamespace(nodeid=nodeid, path=path, config=config)


def test_a_rerun_gets_the_invocations_arguments_without_selection_and_outer_options(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makeini("[pytest]\naddopts = --strict-markers --hpml-compare -p no:benchmark\n")
    pytester.makeconftest("def pytest_addoption(parser):\n"
                          "    parser.addoption('--size', type=int, default=1)\n")
    pytester.makepyfile(myfixtures="")
    pytester.syspathinsert()
    monkeypatch.setenv("PYTEST_ADDOPTS", "--hpml-save-baseline -x")
    config = pytester.parseconfig(
        "-n", "2", "-vvs", "-p", "myfixtures", "-k", "sleep", "-m", "not slow", "tests/",
        "-o", "python_functions=check_*", "--size", "3", "--hpml-max-time=0.25",
        "--hpml-report", "r.md", "--hpml-export-bencher=b.json", "--hpml-confirm", "1",
        "--hpml-baselines", "bl", "--hpml-profile=full", "--basetemp=bt", "--junitxml=j.xml",
        "--deselect", "tests/a.py::b", "--lf", "--pdb", "--", "more/")
    item = _item(config, "tests/test_x.py::check_a[1-x::y]")
    args = confirm.pytest_args(item, "quick", Path("/tmp/rerun.json"),
                               session_module.OUTER_RUN_ONLY)
    assert args == [
        "--strict-markers", "-p", "no:benchmark",  # the ini file's addopts
        "-x",  # PYTEST_ADDOPTS
        "-n", "2", "-v", "-v", "-s", "-p", "myfixtures", "-o", "python_functions=check_*",
        "--size", "3", "--hpml-max-time=0.25",
        f"{pytester.path / 'tests' / 'test_x.py'}::check_a[1-x::y]", "-q",
        "-p", "no:cacheprovider", f"--rootdir={pytester.path}", "--hpml-profile=quick",
        "--hpml-report=/tmp/rerun.json", "--hpml-confirm=0", "-o", "addopts=",
        "-c", str(pytester.path / "tox.ini"), "-n", "0"]


def test_each_outer_run_option_is_declared_so_by_its_module() -> None:
    # Every output, comparison and save option of the plugin, declared outer-run-only where it
    # is declared: a new one missing here leaks into reruns.
    parser = pytest.Parser(processopt=lambda option: None, _ispytest=True)
    for module in (selection_module, comparing_module, reporting_module):
        module.pytest_addoption(parser)
    declared = {a.dest for g in parser._groups for a in g.options}
    outputs = {d for d in declared if d.startswith(("hpml_report", "hpml_export", "hpml_plots",
                                                    "hpml_compare", "hpml_save", "hpml_base",
                                                    "hpml_reset", "hpml_confirm"))}
    assert outputs and outputs <= session_module.OUTER_RUN_ONLY
    assert "hpml_max_time" not in session_module.OUTER_RUN_ONLY


def test_a_forked_rerun_reports_its_exit_code_and_output(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    print('ran here')\n")
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert 1 == 2\n")
    code, out = confirm.run_forked(["test_ok.py", "-q", "-s", "-p", "no:cacheprovider"],
                                   tmp_path, tmp_path / "ok.log")
    assert code == 0 and "ran here" in out and "1 passed" in out
    code, out = confirm.run_forked(["test_bad.py", "-q", "-p", "no:cacheprovider"], tmp_path,
                                   tmp_path / "bad.log")
    assert code == pytest.ExitCode.TESTS_FAILED and "assert 1 == 2" in out


def test_reruns_that_fail_are_reported_and_confirm_nothing(pytester: pytest.Pytester) -> None:
    item = _item(pytester.parseconfig(), "test_x.py::test_x")

    def crashing(args, cwd, log):
        return 3, "INTERNALERROR> something broke\nlast line"

    records, problems = confirm.rerun(item, "quick", 2, run=crashing)
    assert records == []
    assert problems == ["rerun 1 exited 3: INTERNALERROR> something broke | last line",
                        "rerun 2 exited 3: INTERNALERROR> something broke | last line"]


# -- issue 21 case 3 end to end: -p plugins, -o, -c, --rootdir, conftest options, xdist ------------

PROJECT = {
    "cfg/pytest.ini": "[pytest]\naddopts = -p no:benchmark\n",
    # -p myfixtures imports it from the invocation's folder (python -m pytest puts it first).
    "sub/myfixtures.py": "import pytest\n\n@pytest.fixture\ndef scale():\n    return 2.0\n",
    "tests/conftest.py": (
        "import pytest\n\ndef pytest_addoption(parser):\n"
        "    parser.addoption('--size', type=int, default=1)\n\n@pytest.fixture\n"
        "def size(request):\n    return request.config.getoption('--size')\n"),
    "tests/test_speed.py": (
        "import pytest\n\n@pytest.mark.parametrize('k', [1, 2])\n"
        "def check_work(hpml, scale, size, k):\n"
        "    hpml.record('work', scale * size * k, unit='B', better='lower')\n"),
}


def _project(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def _pytest_in(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=folder, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)


def test_reruns_of_a_save_work_with_the_invocations_own_options(tmp_path: Path) -> None:
    _project(tmp_path, PROJECT)
    done = _pytest_in(tmp_path / "sub", *FAST, "-c", "../cfg/pytest.ini", "--rootdir=..",
                      "-p", "myfixtures", "-o", "python_functions=check_*", "-n", "2",
                      "../tests", "--size=3", "--hpml-baselines=../bl", "--hpml-save-baseline",
                      "--hpml-baseline-processes=2", "--hpml-report=../out/r.json")
    assert done.returncode == 0, done.stdout
    assert "fresh process" not in done.stdout
    stored = json.loads(only_baseline_file(tmp_path / "bl").read_text())
    # Each row: the run's own process and one fresh process, and no warning of a failed one.
    assert {r["id"]: r["metrics"][0]["history"] for r in stored["records"]} == {
        "tests/test_speed.py::check_work[1]": [6.0, 6.0],
        "tests/test_speed.py::check_work[2]": [12.0, 12.0]}
    assert [w for r in stored["records"] for w in r["warnings"]] == []


def test_fresh_processes_that_fail_are_said_once(pytester: pytest.Pytester) -> None:
    # The first process leaves a file behind; every fresh process then fails its test.
    pytester.makepyfile("""
        from pathlib import Path
        import pytest

        @pytest.mark.parametrize("k", [1, 2])
        def test_once(hpml, k):
            marker = Path(f"ran-{k}")
            assert not marker.exists(), "a fresh process"
            marker.write_text("")
            hpml.record("work", float(k), unit="B", better="lower")
    """)
    result = pytester.runpytest(*FAST[:-1], "--hpml-save-baseline",
                                "--hpml-baseline-processes=2")
    result.assert_outcomes(passed=2)
    lines = [line for line in result.stdout.lines if "fresh process" in line]
    assert len(lines) == 1, result.stdout.str()
    assert lines[0].startswith(
        "hpml: 2 fresh process(es) failed, so they confirmed nothing (verdicts and saves rest on "
        "the processes that worked); the first: "
        "test_fresh_processes_that_fail_are_said_once.py::test_once[1]: rerun 1 exited 1: ")
