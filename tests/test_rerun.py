"""Fresh processes of the run's tests (pytest_hpml.rerun): each runs the invocation's own
command with the outer run's options back at their defaults and only the node ids asked for,
forked from a forkserver that has imported pytest and torch once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import pytest
from hpml_testing import FAST, only_baseline_file

from pytest_hpml import judging as judging_module
from pytest_hpml import reporting as reporting_module
from pytest_hpml import rerun
from pytest_hpml import selection as selection_module
from pytest_hpml import session as session_module
from pytest_hpml import stored_baseline as stored_baseline_module
from pytest_hpml.machine import forkserver

# -- issue 21 case 3, issue 27: the run's own command, the outer run's options reset ----------

def test_a_fresh_process_gets_the_invocations_arguments_as_given(
        pytester: pytest.Pytester) -> None:
    config = pytester.parseconfig("-p", "no:benchmark", "-k", "sleep", "--hpml-max-time=0.25",
                                  "--hpml-report", "r.md", "--hpml-confirm", "1")
    args = rerun.arguments(config, Path("/tmp/spec.json"), Path("/tmp/fresh"))
    assert args[:8] == ["-p", "no:benchmark", "-k", "sleep", "--hpml-max-time=0.25",
                        "--hpml-report", "r.md", "--hpml-confirm"]
    assert "--hpml-rerun=/tmp/spec.json" in args and f"--rootdir={pytester.path}" in args
    assert args[-4:-2] == ["-n", "0"]  # xdist is installed: no workers of its own
    # the plugin's modules come preloaded, unrewritten: pytest must not say so (or fail on it)
    assert args[-2:] == ["-W", "ignore::pytest.PytestAssertRewriteWarning"]


def test_fresh_processes_forked_with_the_plugin_preloaded_work_under_warnings_as_errors(
        pytester: pytest.Pytester) -> None:
    """The forkserver imports every module of the plugin, so pytest cannot rewrite their asserts
    in a fresh process and warns; a project whose ini turns warnings into errors must still get
    its fresh processes."""
    assert set(rerun.preload()) >= {"pytest_hpml.session", "pytest_hpml.fixture"}
    pytester.makeini("[pytest]\nfilterwarnings =\n    error\n")
    pytester.makepyfile("""
        def test_work(hpml):
            hpml.record("work", 3.0, unit="B", better="lower")
    """)
    result = pytester.runpytest_subprocess(*FAST[:-1], "--hpml-save-baseline",
                                           "--hpml-baseline-processes=3",
                                           "--hpml-save-budget=all")
    result.assert_outcomes(passed=1)
    assert "failed" not in result.stdout.str()
    saved = json.loads(only_baseline_file(pytester.path / "baselines").read_text())
    assert saved["records"][0]["metrics"][0]["history_saves"] == [3], saved  # 3 processes


def test_each_outer_run_option_is_declared_so_by_its_module() -> None:
    # Every output, comparison and save option of the plugin, declared outer-run-only where it
    # is declared: a new one missing here would act in fresh processes.
    parser = pytest.Parser(processopt=lambda option: None, _ispytest=True)
    for module in (selection_module, stored_baseline_module, reporting_module,
                   judging_module):
        module.pytest_addoption(parser)
    declared = {a.dest for g in parser._groups for a in g.options}
    outputs = {d for d in declared if d.startswith(("hpml_report", "hpml_export", "hpml_plots",
                                                    "hpml_compare", "hpml_save", "hpml_base",
                                                    "hpml_reset", "hpml_confirm", "hpml_tol"))}
    assert outputs and outputs <= set(session_module.OUTER_RUN_ONLY)
    assert "hpml_max_time" not in session_module.OUTER_RUN_ONLY
    # A fresh process gets each at its default: a switch off, a count at its own default.
    assert session_module.OUTER_RUN_ONLY["hpml_save_baseline"] is False
    assert session_module.OUTER_RUN_ONLY["hpml_report"] is None


def test_a_forked_process_reports_its_exit_code_and_output(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    print('ran here')\n")
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert 1 == 2\n")
    code, out = forkserver.run_pytest(["test_ok.py", "-q", "-s", "-p", "no:cacheprovider"],
                                      tmp_path, tmp_path / "ok.log", dict(rerun.environment()))
    assert code == 0 and "ran here" in out and "1 passed" in out
    code, out = forkserver.run_pytest(["test_bad.py", "-q", "-p", "no:cacheprovider"],
                                      tmp_path, tmp_path / "bad.log", dict(rerun.environment()))
    assert code == pytest.ExitCode.TESTS_FAILED and "assert 1 == 2" in out



def test_a_forked_process_finds_the_servers_imports_frozen(tmp_path: Path) -> None:
    """The server's imports are in the collector's permanent generation: a fresh process's
    collections (pytest's at the end of every session) do not walk torch's objects again (0.1
    to 0.25 s of every fresh process here), nor copy the server's pages by writing to them."""
    (tmp_path / "test_frozen.py").write_text(
        "import gc\n\ndef test_frozen():\n"
        "    print('frozen:', gc.get_freeze_count())\n"
        "    assert gc.get_freeze_count() > 1000\n")
    code, out = forkserver.run_pytest(["test_frozen.py", "-q", "-s", "-p", "no:cacheprovider"],
                                      tmp_path, tmp_path / "frozen.log",
                                      dict(rerun.environment()))
    assert code == 0 and "1 passed" in out, out

def test_fresh_processes_that_cannot_run_are_broken_and_confirm_nothing(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    config = pytester.parseconfig()

    def crashing(args, cwd, log, environ, preload=(), sys_path=None, deadline=None):
        return 3, "INTERNALERROR> something broke\nlast line"

    monkeypatch.setattr(forkserver, "run_pytest", crashing)
    found = rerun.run_fresh(config, ["test_x.py::test_x"], 2)
    assert found.records == []
    assert found.broken == ("fresh process exited 3 before running a test: INTERNALERROR> "
                            "something broke | last line")
    assert len(found.problems) == 2


OUTER = """
    from pathlib import Path

    def test_sleep(hpml, tmp_path_factory):
        # Counts the processes that ran it; leaves a file in --basetemp.
        counter = Path(__file__).with_name("counter.txt")
        counter.write_text(str(int(counter.read_text() or 0) + 1))
        (tmp_path_factory.getbasetemp() / "mine").write_text("")
        hpml.record("work", 1.0, unit="B", better="lower")

    def test_other(hpml):
        hpml.record("work", 2.0, unit="B", better="lower")
"""


def test_a_fresh_process_leaves_the_outer_runs_files_and_state_alone(tmp_path: Path) -> None:
    (tmp_path / "test_outer.py").write_text(OUTER.replace("\n    ", "\n"))
    (tmp_path / "counter.txt").write_text("")
    (tmp_path / "pytest.ini").write_text("[pytest]\naddopts = -p no:benchmark\n")
    done = _pytest_in(tmp_path, *FAST[:-1], "-k", "sleep or other", "--junitxml=j.xml",
                      "--basetemp=bt", "--hpml-save-baseline", "--hpml-baseline-processes=3",
                      "--hpml-save-budget=all", "--hpml-report=r.json", "--hpml-baselines=bl")
    assert done.returncode == 0, done.stdout
    # The save measured test_sleep in two fresh processes besides the run's own ...
    assert (tmp_path / "counter.txt").read_text() == "3"
    # ... which ran only the test asked for, wrote neither the run's JUnit XML nor its report,
    # and cleared not the run's --basetemp.
    cases = ElementTree.parse(tmp_path / "j.xml").getroot().iter("testcase")
    assert sorted(c.get("name") for c in cases) == ["test_other", "test_sleep"]
    assert (tmp_path / "bt").is_dir() and list((tmp_path / "bt").rglob("mine"))
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["records"]) == 2
    stored = json.loads(only_baseline_file(tmp_path / "bl").read_text())
    assert {r["id"]: len(r["metrics"][0]["history"]) for r in stored["records"]} == {
        "test_outer.py::test_sleep": 3, "test_outer.py::test_other": 3}
    # The run's cache (its --lf state) was not the fresh processes' to write.
    assert not (tmp_path / ".pytest_cache").exists()


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
                      "--hpml-baseline-processes=2", "--hpml-save-budget=all",
                      "--hpml-report=../out/r.json")
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
                                "--hpml-baseline-processes=2", "--hpml-save-budget=all")
    result.assert_outcomes(passed=2)
    lines = [line for line in result.stdout.lines if "fresh process(es) failed" in line]
    assert len(lines) == 1, result.stdout.str()
    assert lines[0].startswith(
        "hpml: 2 fresh process(es) failed, so they confirmed nothing (verdicts and saves rest on "
        "the processes that worked); the first: "
        "test_fresh_processes_that_fail_are_said_once.py::test_once[1]: baseline process 1 "
        "failed: ")


def test_the_first_test_waits_until_the_forkserver_has_imported_its_preload_list(
        pytester: pytest.Pytester) -> None:
    """multiprocessing returns from starting its forkserver as soon as the server is spawned;
    the server then imports its list (torch: seconds of a core) beside whatever runs. A module
    of the list that takes 1.5 s to import shows the first test starting only after it."""
    pytester.makepyfile(slow_preload="""
        import time
        from pathlib import Path
        time.sleep(1.5)
        Path("imported.txt").write_text(repr(time.time()))
    """)
    pytester.makeconftest("""
        from pytest_hpml.machine import forkserver
        forkserver.add_preload(["slow_preload"])
    """)
    pytester.makepyfile("""
        import sys
        import time
        from pathlib import Path

        def test_first(hpml):
            first = Path("first-test.txt")  # the run's own process; fresh ones come later
            if not first.exists():
                first.write_text(repr(time.time()))
                Path("torch-in-the-run.txt").write_text(str("torch" in sys.modules))
            else:
                Path("torch-in-a-fresh-process.txt").write_text(str("torch" in sys.modules))
            hpml.time(lambda: None)
    """)
    pytester.runpytest_subprocess(*FAST[:-1], "--hpml-save-baseline",
                                  "--hpml-baseline-processes=2", "--hpml-save-budget=all",
                                  ).assert_outcomes(passed=1)
    imported = float((pytester.path / "imported.txt").read_text())
    first = float((pytester.path / "first-test.txt").read_text())
    assert first >= imported, f"the first test began {imported - first:.2f} s before the " \
                              "forkserver had imported its list"
    # A suite that never imports torch gets a forkserver that did not import it either.
    assert (pytester.path / "torch-in-the-run.txt").read_text() == "False"
    assert (pytester.path / "torch-in-a-fresh-process.txt").read_text() == "False"



def test_a_collection_that_ends_while_the_server_spawns_still_gets_a_lean_one(
        pytester: pytest.Pytester) -> None:
    """The speculative start with torch spawns its server in a thread; under a CPU hog the
    collection of a suite without torch ended before the spawn, found no server to stop, and
    the fresh processes came with torch. A spawn slowed by 2 s shows the collection waiting
    for it and replacing the server."""
    pytester.makeconftest("""
        import time
        from multiprocessing import forkserver as server

        spawn = server.ensure_running

        def slow_spawn():
            time.sleep(2.0)
            spawn()

        server.ensure_running = slow_spawn
    """)
    pytester.makepyfile("""
        import sys
        from pathlib import Path

        def test_lean(hpml):
            Path(f"torch-{len(list(Path().glob('torch-*')))}.txt").write_text(
                str("torch" in sys.modules))
            hpml.time(lambda: None)
    """)
    pytester.runpytest_subprocess(*FAST[:-1], "--hpml-save-baseline",
                                  "--hpml-baseline-processes=2", "--hpml-save-budget=all",
                                  ).assert_outcomes(passed=1)
    seen = [(pytester.path / f"torch-{i}.txt").read_text() for i in range(2)]
    assert seen == ["False", "False"], seen

def test_the_forkserver_ends_with_the_run(pytester: pytest.Pytester) -> None:
    """The server holds the run's standard output; left to end on its own, it tore down torch
    for 0.5 s more after the run had exited, and a pipe reading the output (a CI log) waited
    for it. It is gone, reaped, by the time the run's process has exited."""
    pytester.makeconftest("""
        from pathlib import Path
        from multiprocessing import forkserver as server

        def pytest_unconfigure(config):
            pid = server._forkserver._forkserver_pid
            Path("server-pid.txt").write_text(str(pid))
    """)
    pytester.makepyfile("""
        import torch

        def test_first(hpml):
            hpml.time(lambda: None)
    """)
    pytester.runpytest_subprocess(*FAST[:-1], "--hpml-save-baseline",
                                  "--hpml-baseline-processes=2", "--hpml-save-budget=all",
                                  ).assert_outcomes(passed=1)
    pid = int((pytester.path / "server-pid.txt").read_text())
    assert not Path(f"/proc/{pid}").exists(), "the forkserver outlived the run"


def test_the_forkserver_imports_torch_only_for_tests_that_use_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    class Controller:  # an xdist controller: it collects nothing, its workers do
        stash = pytest.Stash()

    class Worker:  # what the controller is told when a worker ends
        config = Controller()
        workeroutput = {rerun.WORKER_TORCH: False}

    monkeypatch.delitem(sys.modules, "torch")
    rerun.pytest_testnodedown(Worker(), None)
    assert "torch" not in rerun.preload(Controller())
    assert "pytest" in rerun.preload(Controller())
    Worker.workeroutput = {rerun.WORKER_TORCH: True}
    rerun.pytest_testnodedown(Worker(), None)
    assert rerun.preload(Controller())[0] == "torch"


def test_the_first_test_waits_for_the_forkserver_started_beside_the_collection(
        pytester: pytest.Pytester) -> None:
    """Issue 31, item 8: the forkserver a save (or a comparison's confirmations, or
    --hpml-compare-ref) starts in the background imports torch for seconds; the first test's
    samples, taken beside those imports, read a 3 ms sleep as 6-9 ms under load. A forkserver
    slowed down here shows the first test starting only once it is ready."""
    pytester.makeconftest("""
        import time
        from pathlib import Path
        from pytest_hpml.machine import forkserver

        real = forkserver.ensure_running

        def slow_start():
            time.sleep(1.5)
            real()
            ready = Path("forkserver-ready.txt")
            if not ready.exists():
                ready.write_text(repr(time.time()))

        forkserver.ensure_running = slow_start
    """)
    pytester.makepyfile("""
        import time
        from pathlib import Path

        def test_first(hpml):
            first = Path("first-test.txt")  # the run's own process; fresh ones come later
            if not first.exists():
                first.write_text(repr(time.time()))
            hpml.time(lambda: None)
    """)
    pytester.runpytest_subprocess(*FAST[:-1], "--hpml-save-baseline",
                                  "--hpml-baseline-processes=2", "--hpml-save-budget=all",
                                  ).assert_outcomes(passed=1)
    ready = float((pytester.path / "forkserver-ready.txt").read_text())
    first = float((pytester.path / "first-test.txt").read_text())
    assert first >= ready, f"the first test began {ready - first:.2f} s before the forkserver"


def test_fresh_processes_run_where_the_temporary_folder_is_too_long_for_a_socket(
        tmp_path: Path) -> None:
    # multiprocessing puts the forkserver's socket under TMPDIR; a long one made its start fail
    # with "AF_UNIX path too long", an internal error of the run. Fresh processes then start as
    # subprocesses: slower to start, the same numbers.
    long_tmp = tmp_path / ("t" * (forkserver.SOCKET_PATH_MAX - len(str(tmp_path))))
    long_tmp.mkdir()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_sizes.py").write_text(
        "def test_work(hpml):\n    hpml.record('work', 6.0, unit='B', better='lower')\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *FAST, "--hpml-save-baseline",
         "--hpml-baseline-processes=2", "--hpml-save-budget=all", "--hpml-baselines=bl"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "TMPDIR": str(long_tmp)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "INTERNALERROR" not in done.stdout + done.stderr
    stored = json.loads(only_baseline_file(tmp_path / "bl").read_text())
    assert stored["records"][0]["metrics"][0]["history"] == [6.0, 6.0]  # the fresh one's too


def test_the_forkserver_imports_the_runs_installed_plugins_not_its_conftests(
        pytester: pytest.Pytester) -> None:
    # A fresh process forked from a server that imported only pytest and this plugin imported
    # pytest's own plugin modules (junitxml, skipping, faulthandler, ...) and xdist's again:
    # 0.035 s of its start, in every confirmation.
    pytester.makeconftest("def pytest_configure(config):\n    pass\n")
    config = pytester.parseconfigure("-p", "no:cacheprovider")
    names = rerun.preload(config)
    assert {"_pytest.junitxml", "_pytest.skipping", "_pytest.faulthandler"} <= set(names)
    assert "pytest_hpml.session" in names and len(names) == len(set(names))
    if config.pluginmanager.has_plugin("xdist"):
        assert "xdist.plugin" in names
    assert not [n for n in names if "conftest" in n]
    assert "_pytest.cacheprovider" not in names  # not a plugin of this run
