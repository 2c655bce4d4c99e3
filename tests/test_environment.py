"""Environment control of CPU timings: malloc thresholds, intra-op threads, the CPU frequency
line, and the opt-out; on fakes, then through pytest."""

from __future__ import annotations

import gc
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_hpml import environment


class FakeLibc:
    def __init__(self, result: int = 1) -> None:
        self.calls: list[tuple[int, int]] = []
        self.result = result

    def mallopt(self, param: int, value: int) -> int:
        self.calls.append((param, value))
        return self.result


def test_malloc_thresholds_now_and_for_child_processes() -> None:
    libc, environ = FakeLibc(), {}
    assert environment.set_malloc_thresholds(environ, libc) is True
    assert libc.calls == [(environment.M_MMAP_THRESHOLD, 64 * 2**20),
                          (environment.M_TRIM_THRESHOLD, 128 * 2**20)]
    assert environ == {"MALLOC_MMAP_THRESHOLD_": str(64 * 2**20),
                       "MALLOC_TRIM_THRESHOLD_": str(128 * 2**20)}
    assert environment.set_malloc_thresholds({}, FakeLibc(result=0)) is False


@pytest.mark.parametrize("cores, workers, threads", [
    (1, 0, 1), (2, 0, 1), (2, 2, 1), (4, 0, 3), (16, 0, 15), (16, 4, 3), (16, 32, 1),
])
def test_threads_leave_a_core_and_share_the_rest(cores: int, workers: int, threads: int) -> None:
    assert environment.threads_for(cores, workers) == threads


def test_a_thread_count_the_user_set_is_kept() -> None:
    environ = {"OMP_NUM_THREADS": "6"}
    assert environment.set_threads(1, environ) == 6
    assert environ == {"OMP_NUM_THREADS": "6", "MKL_NUM_THREADS": "6"}
    fresh: dict[str, str] = {}
    assert environment.set_threads(3, fresh) == 3 and fresh["OMP_NUM_THREADS"] == "3"


def test_cpu_frequency_where_the_kernel_says_it(tmp_path: Path) -> None:
    assert environment.cpu_frequency(tmp_path) is None
    (tmp_path / "scaling_governor").write_text("performance\n")
    (tmp_path / "scaling_cur_freq").write_text("2450000\n")
    assert environment.cpu_frequency(tmp_path) == "governor performance, 2.45 GHz"


def _config(mode: str) -> SimpleNamespace:
    return SimpleNamespace(option=SimpleNamespace(hpml_env=mode, numprocesses=None))


def test_keep_changes_nothing() -> None:
    environ: dict[str, str] = {}
    env = environment.control(_config("keep"), environ, FakeLibc())
    assert environ == {} and env.threads is None
    assert env.facts[0] == "left as it is (--hpml-env=keep)"


def test_control_sets_both_and_says_so() -> None:
    environ: dict[str, str] = {}
    env = environment.control(_config("control"), environ, FakeLibc())
    assert "MALLOC_MMAP_THRESHOLD_" in environ and "OMP_NUM_THREADS" in environ
    assert env.facts[0] == "malloc mmap threshold 64 MiB"
    assert env.facts[1].endswith(f"of {environment.usable_cores()} cores")


def test_the_header_reports_the_environment(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "--hpml-env=keep")
    result.stdout.fnmatch_lines(["hpml: environment: left as it is (--hpml-env=keep)*"])
    result = pytester.runpytest("-p", "no:cacheprovider", "--hpml-env=bogus")
    assert result.ret == pytest.ExitCode.USAGE_ERROR


HEAP_TEST = """
import gc
import pathlib


def test_x():
    pathlib.Path("frozen.txt").write_text(str(gc.get_freeze_count()))
"""


def test_the_heap_before_the_first_test_is_frozen_until_the_session_ends(
        pytester: pytest.Pytester) -> None:
    # A full collection inside a timed call walks every object the process holds: the
    # imports', the baseline's and the collected tests' are frozen before the first test.
    pytester.makepyfile(test_heap=HEAP_TEST)
    control = ("-p", "no:cacheprovider", "--hpml-env=control")
    assert pytester.runpytest_subprocess(*control).ret == 0
    assert int((pytester.path / "frozen.txt").read_text()) > 1000
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hpml-env=keep").ret == 0
    assert int((pytester.path / "frozen.txt").read_text()) == 0
    # Nor where the plugin is not in use (no --hpml-* option, no hpml fixture so far).
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider").ret == 0
    assert int((pytester.path / "frozen.txt").read_text()) == 0
    # A run in this process gives its heap back to the collector when it ends.
    gc.unfreeze()
    assert pytester.runpytest_inprocess(*control).ret == 0
    assert int((pytester.path / "frozen.txt").read_text()) > 1000
    assert gc.get_freeze_count() == 0


EXIT_PROBE = """
import atexit, gc, sys
import pytest

# Registered before the run: exit handlers run last to first, so this one runs after any the
# run registers, and sees the heap as the interpreter's last collection will.
atexit.register(lambda: print("frozen at exit:", gc.get_freeze_count() > 0, flush=True))
sys.exit(pytest.main(sys.argv[1:]))
"""


@pytest.mark.parametrize("env, frozen", [("control", True), ("keep", False)])
def test_a_run_that_uses_the_plugin_exits_with_its_heap_frozen(
        pytester: pytest.Pytester, env: str, frozen: bool) -> None:
    """The interpreter's last collection walked everything a run holds (0.44 s of a 10 000-row
    save's exit): a run that uses the plugin freezes its heap as it exits, unless the
    environment is left as it is."""
    pytester.makepyfile(test_one="""
def test_one(hpml):
    hpml.record("time", 1e-3, unit="s", better="lower")
""")
    probe = pytester.makepyfile(exit_probe=EXIT_PROBE)
    result = pytester.run(sys.executable, str(probe), "-q", "-p", "no:cacheprovider",
                          f"--hpml-env={env}", "test_one.py")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"frozen at exit: {frozen}"])


def test_the_exit_freeze_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    registered: list[object] = []
    monkeypatch.setattr(environment, "_EXIT_FROZEN", False)
    monkeypatch.setattr(environment.atexit, "register", registered.append)
    environment.freeze_at_exit()
    environment.freeze_at_exit()
    assert registered == [gc.freeze]


def test_bookkeeping_pauses_the_collector_and_leaves_it_as_it_was() -> None:
    from pytest_hpml.compare.bulk import collector_paused

    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer block's pause holds
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()  # a collector someone turned off stays off
    finally:
        gc.enable()



def test_what_bookkeeping_made_joins_a_frozen_heap_and_only_a_frozen_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hpml.compare import bulk
    from pytest_hpml.compare.bulk import collector_paused

    kept: list[list[list[int]]] = []  # all of it alive: a frozen object freed leaves the count
    gc.unfreeze()
    monkeypatch.setattr(bulk, "heap_frozen", False)
    try:
        with collector_paused(freeze=True):
            kept.append([[i] for i in range(1000)])
        assert gc.get_freeze_count() == 0  # not frozen: the collector left as it was
        gc.freeze()  # as the session's environment control freezes it (freeze_heap)
        monkeypatch.setattr(bulk, "heap_frozen", True)
        before = gc.get_freeze_count()
        with collector_paused(freeze=True):
            kept.append([[i] for i in range(1000)])
        assert gc.get_freeze_count() >= before + 1000
        frozen = gc.get_freeze_count()
        with pytest.raises(ValueError), collector_paused(freeze=True):
            kept.append([[i] for i in range(1000)])
            raise ValueError("a failed block's traceback holds frames: not frozen")
        assert gc.get_freeze_count() == frozen
        with collector_paused(pause=False, freeze=True):  # the fixture's, not paused
            kept.append([[i] for i in range(1000)])
        assert gc.get_freeze_count() == frozen and gc.isenabled() and len(kept) == 4
    finally:
        gc.unfreeze()


CONFIGURED_PROBE = """
import gc
import pathlib


def pytest_sessionstart(session):
    pathlib.Path("at_start.txt").write_text(str(gc.get_freeze_count()))
"""


def test_a_baseline_read_at_configure_is_frozen_before_the_session_starts(
        pytester: pytest.Pytester) -> None:
    # Read at configure, a 10 000-row file was walked by the collections until the first
    # test's freeze (0.03-0.05 s of a compare): frozen as soon as it is read.
    pytester.makepyfile(test_one="""
def test_one(hpml):
    hpml.record("time", 1e-3, unit="s", better="lower")
""")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider",
                                         "--hpml-save-baseline").ret == 0
    pytester.makeconftest(CONFIGURED_PROBE)
    for env, frozen in (("control", True), ("keep", False)):
        assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hpml-compare",
                                             f"--hpml-env={env}").ret == 0
        assert (int((pytester.path / "at_start.txt").read_text()) > 1000) is frozen, env


SUMMARY_PROBE = """
import gc
import pathlib

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_terminal_summary():
    pathlib.Path("at_summary.txt").write_text(str(gc.get_freeze_count()))
"""


def test_what_the_tests_made_is_frozen_before_the_sessions_end(
        pytester: pytest.Pytester) -> None:
    # The collections of the terminal's summary and of pytest's own end walked a 10 000-row
    # sweep's judged records (0.2 s of its compare): frozen once the last test has run.
    pytester.makeconftest(SUMMARY_PROBE)
    pytester.makepyfile(test_made="""
import gc
import pathlib

MADE = []


def test_made(hpml):
    MADE.extend([i] for i in range(20000))  # lists: the collector tracks them
    pathlib.Path("at_test.txt").write_text(str(gc.get_freeze_count()))
""")
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hpml-env=control").ret == 0
    at_test = int((pytester.path / "at_test.txt").read_text())
    assert int((pytester.path / "at_summary.txt").read_text()) >= at_test + 20000
    assert pytester.runpytest_subprocess("-p", "no:cacheprovider", "--hpml-env=keep").ret == 0
    assert int((pytester.path / "at_summary.txt").read_text()) == 0
