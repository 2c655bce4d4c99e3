"""Nothing measured is lost and no good file is replaced by a worse one (issue 21, cases 6, 7, 8,
11 and 17): SIGTERM and SIGHUP stop a run as Ctrl-C does, with its confirmation rerun and the
forkserver; outputs are written atomically (a full disk keeps the previous file); a run that
ran nothing writes nothing; two outputs never share a file; a chart that cannot be drawn says
why. The signals and the full disk are real, in subprocesses."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hpml_testing import FAST, baseline_file, strict_json

from pytest_hpml import reporting

ONE_ROW = "def test_one(hpml):\n    hpml.record('b', 1.0, unit='B', better='lower')\n"


def _default_signals() -> None:
    # The child starts with the default actions, whatever this process (an xdist worker, a
    # shell under nohup) ignores: an ignored signal stays ignored in the processes it starts.
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def _start(folder: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "pytest", *FAST, *args], cwd=folder,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=_default_signals)


def _wait_for(path: Path, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert proc.poll() is None, proc.communicate()[0]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def _gone(pid: int) -> bool:
    """Whether a process has ended (a zombie waiting for its parent has ended too)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


# -- case 6: SIGTERM and SIGHUP stop the run as Ctrl-C does ---------------------------------------

STOPPED = """
    import time
    from pathlib import Path

    def test_a(hpml):
        hpml.record("bytes", 1.0, unit="B", better="lower")

    def test_b(hpml):
        hpml.record("bytes", 2.0, unit="B", better="lower")

    def test_c_still_running(hpml):
        Path("started").write_text("")
        time.sleep(60)  # the job is cancelled here
        hpml.record("bytes", 3.0, unit="B", better="lower")
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGHUP"])
def test_a_terminated_run_writes_the_outputs_of_the_tests_that_finished(
        pytester: pytest.Pytester, name: str) -> None:
    pytester.makepyfile(test_stopped=STOPPED)
    proc = _start(pytester.path, "--hpml-save-baseline", "--hpml-report=r.json",
                  "--hpml-export-bencher=b.json")
    _wait_for(pytester.path / "started", proc)
    proc.send_signal(getattr(signal, name))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
    assert (f"hpml: terminated by {name}: the run stopped as on Ctrl-C; its outputs hold the 2 "
            "test(s) that finished") in out
    assert "hpml: wrote r.json" in out and "hpml: wrote b.json" in out
    ids = ["test_stopped.py::test_a", "test_stopped.py::test_b"]
    assert [r["id"] for r in strict_json(pytester.path / "r.json")["records"]] == ids
    assert sorted(strict_json(pytester.path / "b.json")) == ids
    stored = strict_json(baseline_file(pytester.path / "baselines"))
    assert [r["id"] for r in stored["records"]] == ids


REGRESSING = """
    import os
    import time
    from pathlib import Path

    def test_bytes(hpml):
        first = Path("first")
        if first.exists():  # a fresh process confirming the regression
            Path("rerun.pid").write_text(f"{os.getpid()} {os.getppid()}")
            time.sleep(120)  # the job is cancelled here
        first.write_text("")
        hpml.record("bytes", float(Path("value.txt").read_text()), unit="B", better="lower")
"""


@pytest.mark.parametrize("name", ["SIGTERM", "SIGKILL"])
def test_a_terminated_run_ends_its_confirmation_rerun_and_the_forkserver(
        pytester: pytest.Pytester, name: str) -> None:
    # SIGKILL leaves the run no chance: the kernel ends the forkserver's pipe, then the rerun.
    pytester.makepyfile(test_regressing=REGRESSING)
    (pytester.path / "value.txt").write_text("1000")
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    (pytester.path / "first").unlink()
    (pytester.path / "value.txt").write_text("2000")  # regressed: a fresh process confirms
    proc = _start(pytester.path, "--hpml-compare")
    _wait_for(pytester.path / "rerun.pid", proc)
    rerun, forkserver = map(int, (pytester.path / "rerun.pid").read_text().split())
    proc.send_signal(getattr(signal, name))
    out, _ = proc.communicate(timeout=120)
    if name == "SIGTERM":
        assert proc.returncode == pytest.ExitCode.INTERRUPTED, out
        assert "hpml: terminated by SIGTERM" in out
    deadline = time.monotonic() + 30
    while not (_gone(rerun) and _gone(forkserver)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _gone(rerun), "the confirmation rerun runs on"
    assert _gone(forkserver), "the forkserver runs on"


def test_handlers_are_left_to_the_user_and_to_xdist_workers_and_restored(
        pytester: pytest.Pytester) -> None:
    before = signal.getsignal(signal.SIGTERM)
    pytester.makepyfile(test_handlers="""
        import signal

        def test_in_the_run():
            handler = signal.getsignal(signal.SIGTERM)
            assert getattr(handler, "__qualname__", "") == "Stopper.handle", handler
    """)
    pytester.runpytest(*FAST).assert_outcomes(passed=1)
    assert signal.getsignal(signal.SIGTERM) is before  # put back at unconfigure
    # A handler of the user's own is kept.
    pytester.makeconftest("import signal\n\ndef mine(number, frame):\n    pass\n\n"
                          "previous = signal.signal(signal.SIGTERM, mine)\n\n"
                          "def pytest_unconfigure(config):\n"
                          "    signal.signal(signal.SIGTERM, previous)\n")
    pytester.makepyfile(test_handlers="""
        import signal

        def test_in_the_run():
            assert signal.getsignal(signal.SIGTERM).__name__ == "mine"
    """)
    pytester.runpytest(*FAST).assert_outcomes(passed=1)
    # An xdist worker keeps the default: the controller stops it.
    (pytester.path / "conftest.py").unlink()
    pytester.makepyfile(test_handlers="""
        import signal

        def test_in_a_worker():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    """)
    pytester.runpytest(*FAST, "-n", "1").assert_outcomes(passed=1)


# -- case 7: a full disk keeps the previous report and exports ------------------------------------

ROWS = """
    import pytest

    # Explicit ids: pytest shortens long parameter values to "row0", and the rows must be long.
    @pytest.mark.parametrize("row", range(300), ids=[f"row{i:03d}-{'x' * 150}" for i in range(300)])
    def test_row(hpml, row):
        hpml.record("bytes", 1.0, unit="B", better="lower", samples=[1.0] * 20)
"""

#: Where tmpfs cannot be mounted (not root): the disk fills at the flush to disk.
FULL_AT_FSYNC = """
import errno, os
from pytest_hpml.report import files

def full(fd):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

files.os.fsync = full
"""


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[tuple[Path, str]]:
    """A 64 KiB tmpfs, and the conftest text the inner run needs (none on a real small disk)."""
    folder = tmp_path / "full"
    folder.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(folder)],
        capture_output=True).returncode == 0
    try:
        yield folder, "" if mounted else FULL_AT_FSYNC
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], check=True)


@pytest.mark.parametrize("option", ["--hpml-report=full/r.json",
                                    "--hpml-export-bencher=full/b.json"])
def test_a_full_disk_keeps_the_previous_output_intact(
        small_disk: tuple[Path, str], option: str) -> None:
    folder, conftest = small_disk
    project = folder.parent
    (project / "test_rows.py").write_text(ROWS.replace("\n    ", "\n"))
    (project / "pytest.ini").write_text("[pytest]\n")
    done = subprocess.run([sys.executable, "-m", "pytest", *FAST, option, "-k", "row000"],
                          cwd=project, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout
    output = project / option.split("=", 1)[1]
    before = output.read_bytes()
    strict_json(output)
    (project / "conftest.py").write_text(conftest)
    done = subprocess.run([sys.executable, "-m", "pytest", *FAST, option], cwd=project,
                          capture_output=True, text=True)
    assert done.returncode == reporting.OUTPUTS_FAILED, done.stdout
    assert (f"hpml: cannot write full/{output.name}: {os.strerror(errno.ENOSPC)}"
            in done.stdout), done.stdout
    assert output.read_bytes() == before  # the previous good file, not 64 KiB of a new one
    assert sorted(p.name for p in folder.iterdir()) == [output.name]  # no temporary left


# -- case 8: a run that runs nothing writes nothing ----------------------------------------------

@pytest.mark.parametrize("nothing", [("--co",), ("-k", "matches_nothing"), ("broken.py",)])
def test_a_run_that_runs_no_test_keeps_the_previous_outputs(
        pytester: pytest.Pytester, nothing: tuple[str, ...]) -> None:
    pytester.makepyfile(test_one=ONE_ROW,
                        broken="import nowhere_to_be_found\n\ndef test_broken():\n    pass\n")
    outputs = ("--hpml-report=r.json", "--hpml-export-bencher=b.json", "--hpml-save-baseline")
    pytester.runpytest(*FAST, *outputs, "test_one.py").assert_outcomes(passed=1)
    files = [pytester.path / "r.json", pytester.path / "b.json",
             baseline_file(pytester.path / "baselines")]
    before = [f.read_bytes() for f in files]
    result = pytester.runpytest(*FAST, *outputs, *nothing)
    assert [f.read_bytes() for f in files] == before
    result.stdout.fnmatch_lines(["hpml: no test ran, so nothing was written (report, bencher, "
                                 "baseline); the previous files are as they were"])
    assert "hpml: wrote" not in result.stdout.str()


# -- case 11: two outputs, one file --------------------------------------------------------------

@pytest.mark.parametrize("options, message", [
    (("--hpml-report=same.json", "--hpml-export-bencher=same.json"),
     "--hpml-report=same.json and --hpml-export-bencher=same.json name the same file "
     "(same.json); give each output its own path"),
    (("--hpml-report=out/a-bigger.json", "--hpml-export-benchmark-action=out/a.json"),
     "--hpml-report=out/a-bigger.json and --hpml-export-benchmark-action=out/a.json (its "
     "out/a-bigger.json) name the same file"),
])
def test_two_outputs_with_one_path_is_a_usage_error(
        pytester: pytest.Pytester, options: tuple[str, ...], message: str) -> None:
    pytester.makepyfile("def test_x():\n    raise SystemExit('must not run')\n")
    result = pytester.runpytest(*FAST, *options)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {message}" in result.stderr.str()


# -- case 17: a chart with no drawable point says why ---------------------------------------------

CHARTS = """
    import pytest

    @pytest.mark.hpml_plot("misspelt.png", x="k", y="tme")
    @pytest.mark.hpml_plot("string_x.png", x="name", y="time")
    @pytest.mark.hpml_plot("roofline.png", kind="roofline", x="k", y="time", bandwidth="bw")
    @pytest.mark.hpml_plot("other_device.png", x="k", y="time", where={"name": "gpu"})
    @pytest.mark.hpml_plot("good.png", x="k", y="time")
    @pytest.mark.parametrize("k", [1, 2])
    def test_sweep(hpml, k):
        hpml.param(name="cpu")
        hpml.record("time", k * 1e-3, unit="s", better="lower")
"""


def test_a_chart_with_no_drawable_point_says_why(pytester: pytest.Pytester) -> None:
    pytest.importorskip("matplotlib")
    pytester.makepyfile(test_charts=CHARTS)
    result = pytester.runpytest(*FAST, "--hpml-plots=plots")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines_random([
        "hpml: --hpml-plots: chart misspelt.png (line, test_charts.py::test_sweep) not drawn: "
        "no row has y='tme'; its rows have k, name, time",
        "hpml: --hpml-plots: chart string_x.png (line, test_charts.py::test_sweep) not drawn: "
        "x='name' is not a finite number in any row (e.g. 'cpu')",
        "hpml: --hpml-plots: chart roofline.png (roofline, test_charts.py::test_sweep) not "
        "drawn: it needs peak= (a parameter or a metric of its rows)",
        "hpml: wrote plots/good.png"])
    # Rows that did not run (another device, deselected) are no mistake: not a word.
    assert "other_device.png" not in result.stdout.str()
    assert sorted(p.name for p in (pytester.path / "plots").iterdir()) == ["good.png"]
