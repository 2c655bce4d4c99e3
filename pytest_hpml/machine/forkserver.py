"""The process's one forkserver, shared by the distributed launcher (ranks) and fresh pytest
processes (confirmations, saves, processes at a git ref: pytest_hpml.rerun), and how a pytest
process is forked from it.

multiprocessing keeps a single forkserver per process, and its preload list is read once, when
the server starts; a later list is ignored. So every user adds to one list here instead of
replacing it, and whoever starts the server first starts it with all that was asked so far.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from multiprocessing import forkserver as server
from pathlib import Path
from typing import Any

_preload: list[str] = []
#: The server imports this last, whatever the list: it freezes the heap the imports made.
FROZEN_HEAP = "pytest_hpml.machine.frozen_heap"


#: The longest path of a Unix socket (sun_path: 108 bytes on Linux, its NUL included).
SOCKET_PATH_MAX = 107
#: What multiprocessing adds to the temporary folder for the server's socket.
SOCKET_SUFFIX = len("/pymp-xxxxxxxx/listener-xxxxxxxx")


def available() -> bool:
    """Whether this platform has a forkserver and its socket fits under the temporary folder
    (TMPDIR): multiprocessing puts the socket there, and a folder of more than 75 bytes made
    the server's start fail ("OSError: AF_UNIX path too long", an internal error of the run).
    Without it, fresh processes start as subprocesses and ranks are spawned."""
    return ("forkserver" in multiprocessing.get_all_start_methods()
            and len(os.fsencode(tempfile.gettempdir())) + SOCKET_SUFFIX <= SOCKET_PATH_MAX)


def asked() -> list[str]:
    """The modules the server is asked to import at its next start (the frozen heap aside)."""
    return list(_preload)


def drop_preload(name: str) -> list[str]:
    """Take a module off the list (it takes effect at the server's next start)."""
    if name in _preload:
        _preload.remove(name)
    return add_preload(())


def add_preload(modules: Iterable[str]) -> list[str]:
    """Add modules for the server to import before it forks anything; returns the whole list.

    Takes effect only if the server has not started yet in this process (a started server keeps
    its imports: processes forked from it are then slower to start, never different)."""
    for name in modules:
        if name not in _preload:
            _preload.append(name)
    if available():
        server.set_forkserver_preload([*_preload, FROZEN_HEAP])
    return list(_preload)


def context(preload: Iterable[str] = (), torch_context: bool = False) -> Any | None:
    """The forkserver start context with `preload` added to the list, or None where the
    platform has no forkserver. torch_context: torch.multiprocessing's context (tensors sent
    through its queues are shared, not copied)."""
    if not available():
        return None  # pragma: no cover - Windows, macOS spawn-only builds
    add_preload(preload)
    if torch_context:
        import torch.multiprocessing as torch_mp

        return torch_mp.get_context("forkserver")
    return multiprocessing.get_context("forkserver")


def ensure_running() -> None:
    """Start the server now (if it is not running) with the preload list as it stands; it
    imports that list in the background (multiprocessing returns once it is spawned)."""
    if available():
        add_preload(())  # the list as it stands, the frozen heap last
        server.ensure_running()
        if not _ended_at_exit:
            _ended_at_exit.append(os.getpid())
            atexit.register(_end_now)


_ended_at_exit: list[int] = []  # the process that has the server ended when it exits


def _end_now() -> None:
    """End the server at once when this process exits. It holds the standard output it was
    spawned with, so a pipe that reads the run's output stays open until the server has exited
    too, and its exit tears down what it imported: 1.8 s after pytest's last line where it
    imported torch. Every process it forked has ended by then (each is joined or killed), and
    it keeps nothing worth an orderly end."""
    if _ended_at_exit == [os.getpid()]:  # not a process forked from the one that started it
        stop()


def _nothing() -> None:
    """The body of the process that shows the server ready."""


def preloaded() -> list[str] | None:
    """What the running server was started with (None where none runs)."""
    state = getattr(server, "_forkserver", None)
    if getattr(state, "_forkserver_pid", None) is None:
        return None
    return [name for name in getattr(state, "_preload_modules", None) or []
            if name != FROZEN_HEAP]


def stop() -> None:
    """End the server now (a process forked from it later starts a new one); a process waiting
    for it to be ready gets an error."""
    state = getattr(server, "_forkserver", None)
    pid = getattr(state, "_forkserver_pid", None)
    if pid is None:
        return
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        state._stop()  # type: ignore[union-attr]  # reaps it, removes its socket


def ensure_ready() -> None:
    """Start the server (if it is not running) and return once it has imported its preload
    list: the server forks nothing before its imports are done, so a process forked from it
    and joined at once marks the end of them. Imports running beside a timed sample slow it
    (torch's take seconds of a core), which ensure_running alone would allow."""
    if not available():
        return  # pragma: no cover - platforms without a forkserver
    ensure_running()
    probe = multiprocessing.get_context("forkserver").Process(
        target=_nothing, name="hpml-forkserver-ready")
    probe.start()
    probe.join()


# -- a pytest process forked from the server ------------------------------------------------------

#: Seconds a forked pytest process may run before it is killed.
PROCESS_TIMEOUT = 900.0
#: Seconds a stopped process has to end its own session before it is killed.
STOP_GRACE = 5.0


def _end_with_the_parent() -> None:
    """Make this process end with the run that started it, even when the run is killed without
    a chance to stop it (SIGKILL, an xdist worker killed).

    The forkserver ends when no process holds the write end of its "alive" pipe; the run holds
    one, and multiprocessing hands one to every process the server forks, so a running child
    would keep the server, and the server the child, alive for ever. The child gives its copy
    up (it never asks the server for anything: a forkserver it needs is its own), and asks the
    kernel (Linux) for SIGTERM when its parent, the server, ends."""
    alive = getattr(getattr(server, "_forkserver", None), "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver._forkserver_alive_fd = None  # type: ignore[attr-defined]
    if not sys.platform.startswith("linux"):
        return  # pragma: no cover
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
        pass


def _pytest_body(args: list[str], cwd: str, log: str, environ: dict[str, str],
                 sys_path: list[str] | None = None) -> None:
    """A forked pytest process's body: pytest's output to a log; `sys_path`: the import path
    to run with (another checkout's code, compare/reference.py)."""
    _end_with_the_parent()
    if sys_path is not None:
        sys.path[:] = sys_path
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(cwd)
    # The run's environment now, as a subprocess started now would get it (the forkserver's
    # is the one it started with).
    os.environ.clear()
    os.environ.update(environ)
    import pytest as fresh_pytest

    code = fresh_pytest.main(args)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(code))


def _stop(process: Any) -> None:
    """End a child: SIGTERM (it stops its session as Ctrl-C does), then SIGKILL."""
    process.terminate()
    process.join(STOP_GRACE)
    if process.is_alive():
        process.kill()
        process.join()


def run_pytest(args: list[str], cwd: Path, log: Path, environ: dict[str, str],
               preload: Iterable[str] = (), sys_path: list[str] | None = None,
               timeout: float = PROCESS_TIMEOUT, deadline: float | None = None
               ) -> tuple[int, str]:
    """Run pytest with `args` in a process forked from the server (a subprocess where there is
    none), in `cwd`, with `environ` and `sys_path` (default: the server's, as this process's);
    returns its exit status and output. The child starts with a fresh allocator and no thread
    pools, as a new process does, without paying the server's imports again; it ends with this
    process (Ctrl-C, SIGTERM) and with the server. After `timeout` seconds, or at `deadline`
    (time.monotonic(), whatever starting the server took), it is stopped as Ctrl-C stops a run
    (SIGTERM: its session ends and writes what its finished tests made)."""
    start = context(preload)
    if start is None:  # pragma: no cover - platforms without a forkserver
        # subprocess.run kills the child on any exception, KeyboardInterrupt included.
        done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=timeout, env=environ)
        return done.returncode, done.stdout + done.stderr
    process = start.Process(target=_pytest_body, name="hpml-pytest",
                            args=(args, str(cwd), str(log), environ, sys_path))
    process.start()
    if deadline is not None:
        timeout = max(0.0, min(timeout, deadline - time.monotonic()))
    try:
        process.join(timeout)
    except BaseException:
        # Ctrl-C or SIGTERM in this run: the child ends with it instead of running on.
        _stop(process)
        raise
    if process.is_alive():
        _stop(process)
        output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
        return -9, f"{output}\nstopped after {timeout:g} s"
    output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return process.exitcode or 0, output
