"""Confirmation runs: a test whose metric looks regressed is measured again in fresh processes
before the verdict is final, so a CI failure means something. The cost is paid only where a
regression is suspected.

A rerun is the run's own pytest command for one node id: the invocation's arguments (with the
ini file's addopts and PYTEST_ADDOPTS, as pytest itself prepends them), in the invocation's
folder, so that plugins (-p), ini overrides (-o), the configuration file (-c), --rootdir,
conftest options and relative paths mean what they meant. Left out: the selection (paths,
-k, -m, --deselect, --lf ...), which the node id replaces; the outer run's outputs, comparison
and save (each --hpml-* option declares whether reruns get it); pytest's own outputs and
debuggers. Given: the profile the run chose, a JSON report to read the records back from, no
confirmations of its own, no xdist.

Fresh processes, because the noise that fools a comparison lives between processes (allocator
state, thread placement, clocks), where samples of one process cannot see it. Each rerun is
forked from a forkserver that has imported torch and pytest once and run nothing (so a rerun
starts with a fresh allocator and no thread pools, as a new process does, without paying
seconds of imports each time); where the platform has no forkserver, a plain `python -m
pytest` subprocess. A rerun ends with the run: it is stopped when the run is (Ctrl-C, SIGTERM),
and when the run is killed outright the forkserver ends, and the kernel stops the rerun.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Collection, Iterable
from multiprocessing import forkserver as mp_forkserver
from pathlib import Path
from typing import Any

import pytest

from pytest_hpml.machine import forkserver as shared_forkserver
from pytest_hpml.results import Metric, Record

RERUN_TIMEOUT = 900.0
#: Seconds a stopped rerun has to end its own session before it is killed.
STOP_GRACE = 5.0

#: pytest's own options a rerun of one node id must not get, by argparse dest: the selection
#: the node id replaces; what needs the cache (a rerun runs without it, so that it leaves the
#: run's --lf state alone); what would write over the outer run's files or stop for a person.
PYTEST_OUTER_RUN_ONLY = frozenset({
    "file_or_dir", "keyword", "markexpr", "deselect", "ignore", "ignore_glob",
    "lf", "failedfirst", "newfirst", "cacheshow", "cacheclear", "last_failed_no_failures",
    "stepwise", "stepwise_skip", "stepwise_reset",
    "collectonly", "setuponly", "setupplan", "looponfail",
    "basetemp", "xmlpath", "log_file", "debug", "pastebin", "usepdb", "usepdb_cls", "trace",
})


def _values_taken(action: argparse.Action, rest: list[str]) -> int:
    """How many of the arguments after an option's flag are its values, as argparse reads
    them (the outer run parsed the same list, so it is well formed)."""
    def is_value(text: str) -> bool:
        return not text.startswith("-") or text == "-" or text.lstrip("-").replace(
            ".", "", 1).isdigit()

    nargs = action.nargs
    if nargs is None:
        return min(1, len(rest))
    if isinstance(nargs, int):
        return min(nargs, len(rest))
    if nargs == "?":
        return 1 if rest and is_value(rest[0]) else 0
    if nargs in ("*", "+"):
        count = 0
        while count < len(rest) and is_value(rest[count]):
            count += 1
        return count
    return len(rest)  # argparse.REMAINDER and sub-parsers: everything after


def _expand_short(arg: str, actions: dict[str, argparse.Action]) -> list[str]:
    """'-vvs' as '-v', '-v', '-s'; '-n2' and '-pname' stay one flag with its value."""
    out = []
    rest = arg[1:]
    while rest:
        action = actions.get(f"-{rest[0]}")
        if action is None or action.nargs != 0 or len(rest) == 1:
            out.append(f"-{rest}")  # a value follows in the same argument (or unknown)
            break
        out.append(f"-{rest[0]}")
        rest = rest[1:]
    return out


def split_options(args: Iterable[str], parser: argparse.ArgumentParser
                  ) -> list[tuple[str | None, list[str]]]:
    """The arguments of a pytest command as (dest, the arguments that say it): an option with
    its values, or a positional argument (dest "file_or_dir"). An option the parser does not
    know keeps dest None and is passed on as it was."""
    actions = parser._option_string_actions  # argparse's own table: flag -> action
    args = [str(a) for a in args]
    out: list[tuple[str | None, list[str]]] = []
    i = 0
    while i < len(args):
        arg, rest = args[i], args[i + 1:]
        flag, has_value, _ = arg.partition("=")
        if arg == "--":
            out += [("file_or_dir", [a]) for a in rest]
            break
        if not arg.startswith("-") or arg == "-":
            out.append(("file_or_dir", [arg]))
        elif arg.startswith("--") or (has_value and flag in actions):
            action = actions.get(flag)  # --name, --name=value, -n=2
            taken = 0 if has_value or action is None else _values_taken(action, rest)
            out.append((action.dest if action else None, [arg, *rest[:taken]]))
            i += taken
        else:
            *flags, last = _expand_short(arg, actions)  # -x, -vvs, -n2, -n 2
            out += [(actions[f].dest, [f]) for f in flags]
            action = actions.get(last[:2])
            taken = 0 if len(last) > 2 or action is None else _values_taken(action, rest)
            out.append((action.dest if action else None, [last, *rest[:taken]]))
            i += taken
        i += 1
    return out


def node_argument(item: pytest.Item) -> str:
    """The node id as a path from anywhere: the rerun runs in the invocation's folder, where
    a node id (relative to the rootdir) may not resolve."""
    nodeid = item.nodeid
    at = nodeid.find("::")
    return str(item.path) + (nodeid[at:] if at >= 0 else "")


def invocation_args(config: pytest.Config) -> list[str]:
    """The arguments pytest parsed for this run: the ini file's addopts, PYTEST_ADDOPTS and the
    command line, in the order pytest puts them."""
    env = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    return [*config.getini("addopts"), *env, *map(str, config.invocation_params.args)]


def pytest_args(item: pytest.Item, profile: str, report: Path,
                outer_run_only: Collection[str] = ()) -> list[str]:
    """pytest's arguments for one rerun of `item` writing its records to `report`: the run's
    own arguments without the options in `outer_run_only` (dests) or PYTEST_OUTER_RUN_ONLY."""
    config = item.config
    dropped = PYTEST_OUTER_RUN_ONLY | set(outer_run_only)
    kept = [arg for dest, group in split_options(invocation_args(config),
                                                 config._parser.optparser)
            if dest not in dropped for arg in group]
    args = [*kept, node_argument(item), "-q", "-p", "no:cacheprovider",
            f"--rootdir={config.rootpath}", f"--hpml-profile={profile}",
            f"--hpml-report={report}", "--hpml-confirm=0",
            # addopts and PYTEST_ADDOPTS are in `kept` already, filtered.
            "-o", "addopts="]
    if config.inipath:
        args += ["-c", str(config.inipath)]
    if config.pluginmanager.has_plugin("xdist"):
        args += ["-n", "0"]  # the run's own -n, and an -n in addopts, start no workers
    return args


def _end_with_the_run() -> None:
    """Make this rerun end with the run that started it, even when the run is killed without
    a chance to stop it (SIGKILL, an xdist worker killed).

    The forkserver ends when no process holds the write end of its "alive" pipe; the run holds
    one, and multiprocessing hands one to every process the server forks, so a running rerun
    would keep the server, and the server the rerun, alive for ever. The rerun gives its copy
    up (it never asks the server for anything: a forkserver it needs is its own), and asks the
    kernel (Linux) for SIGTERM when its parent, the server, ends."""
    server = getattr(mp_forkserver, "_forkserver", None)
    alive = getattr(server, "_forkserver_alive_fd", None)
    if alive is not None:
        with contextlib.suppress(OSError):
            os.close(alive)
        server._forkserver_alive_fd = None
    if not sys.platform.startswith("linux"):
        return  # pragma: no cover
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # pragma: no cover - no prctl in this libc
        pass


def _forked_pytest(args: list[str], cwd: str, log: str, environ: dict[str, str],
                   sys_path: list[str] | None = None) -> None:
    """A rerun's process body (forked from the forkserver): pytest's output to a log;
    `sys_path`: the import path to run with (another checkout's code: compare/reference.py)."""
    _end_with_the_run()
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


def forkserver() -> Any | None:
    return shared_forkserver.context(["torch", "pytest", "pytest_hpml.plugin"])


def start_forkserver_in_background() -> None:
    """Start the forkserver now, its imports running beside the test collection on the core the
    environment leaves free, so that a confirmation later costs a fork, not seconds of imports.
    Its process is idle once started: it does not disturb the timings."""
    if forkserver() is None:  # pragma: no cover - platforms without a forkserver
        return
    threading.Thread(target=shared_forkserver.ensure_running, name="hpml-forkserver",
                     daemon=True).start()


def rerun_environment() -> dict[str, str]:
    """This process's environment for a rerun, without PYTEST_ADDOPTS: the rerun's arguments
    hold them already, filtered."""
    return {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}


def _stop(process: Any) -> None:
    """End a rerun: SIGTERM (it stops its session as Ctrl-C does), then SIGKILL."""
    process.terminate()
    process.join(STOP_GRACE)
    if process.is_alive():
        process.kill()
        process.join()


def run_forked(args: list[str], cwd: Path, log: Path, environ: dict[str, str] | None = None,
               sys_path: list[str] | None = None) -> tuple[int, str]:
    """Run pytest with `args` in a process forked from the forkserver (a subprocess where there
    is none), in `cwd`, with `environ` (default: this run's) and `sys_path` (default: the
    forkserver's, as this run's); returns its exit status and output."""
    environ = rerun_environment() if environ is None else environ
    context = forkserver()
    if context is None:  # pragma: no cover - platforms without a forkserver
        # subprocess.run kills the child on any exception, KeyboardInterrupt included.
        done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=RERUN_TIMEOUT,
                              env=environ)
        return done.returncode, done.stdout + done.stderr
    process = context.Process(target=_forked_pytest, name="hpml-confirm",
                              args=(args, str(cwd), str(log), environ, sys_path))
    process.start()
    try:
        process.join(RERUN_TIMEOUT)
    except BaseException:
        # Ctrl-C or SIGTERM in this run: the rerun ends with it instead of running on.
        _stop(process)
        raise
    if process.is_alive():
        _stop(process)
        return -9, f"killed after {RERUN_TIMEOUT:g} s"
    output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return process.exitcode or 0, output


def rerun(item: pytest.Item, profile: str, runs: int, outer_run_only: Collection[str] = (),
          run: Any = run_forked) -> tuple[list[list[Record]], list[str]]:
    """The test's records from `runs` fresh processes, and what went wrong in any that failed
    (a rerun that fails its own checks confirms nothing). `outer_run_only`: the dests of the
    options reruns do not get."""
    records, problems = [], []
    with tempfile.TemporaryDirectory(prefix="hpml-confirm-") as folder:
        for i in range(runs):
            report = Path(folder, f"rerun-{i}.json")
            code, output = run(pytest_args(item, profile, report, outer_run_only),
                               item.config.invocation_params.dir,
                               Path(folder, f"rerun-{i}.log"))
            if code != 0 or not report.exists():
                tail = output.strip().splitlines()[-3:]
                problems.append(f"rerun {i + 1} exited {code}: " + " | ".join(tail))
                continue
            document = json.loads(report.read_text(encoding="utf-8"))
            records.append([Record.from_dict(r) for r in document["records"]])
    return records, problems


def metrics_by_name(reruns: list[list[Record]], record_id: str) -> dict[str, list[Metric]]:
    """{metric name: the metric as each rerun measured it} for one row."""
    out: dict[str, list[Metric]] = {}
    for records in reruns:
        for record in records:
            if record.id == record_id:
                for m in record.metrics:
                    out.setdefault(m.name, []).append(m)
    return out
