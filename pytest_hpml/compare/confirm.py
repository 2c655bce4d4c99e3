"""Confirmation runs: a test whose metric looks regressed is measured again in fresh processes
before the verdict is final, so a CI failure means something. The cost is paid only where a
regression is suspected.

A rerun is `pytest <nodeid>` in the test's rootdir with the run's own --hpml-* options
(profile, timing policy, data root ...) and a JSON report; its records are read back. Fresh
processes, because the noise that fools a comparison lives between processes (allocator state,
thread placement, clocks), where samples of one process cannot see it.

Each rerun is forked from a forkserver that has imported torch and pytest once and run nothing
(so a rerun starts with a fresh allocator and no thread pools, as a new process does, without
paying seconds of imports each time); where the platform has no forkserver, a plain
`python -m pytest` subprocess.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_hpml.machine import forkserver as shared_forkserver
from pytest_hpml.results import Metric, Record

#: Options that belong to the outer run only (outputs, baselines, confirmation itself).
NOT_PASSED = {"hpml_report", "hpml_export_benchmark_action", "hpml_export_bencher",
              "hpml_plots", "hpml_compare", "hpml_save_baseline", "hpml_reset_baseline",
              "hpml_baselines", "hpml_baseline_runs", "hpml_baseline_processes", "hpml_confirm",
              "hpml_profile"}
RERUN_TIMEOUT = 900.0


def passed_options(option: Any) -> list[str]:
    """The run's --hpml-* options (any plugin's or conftest's that follows the naming), as
    arguments for a rerun."""
    args = []
    for dest, value in sorted(vars(option).items()):
        if not dest.startswith("hpml_") or dest in NOT_PASSED or value in (None, False, ""):
            continue
        flag = "--" + dest.replace("_", "-")
        args.append(flag if value is True else f"{flag}={value}")
    return args


def plugin_args(invocation: Sequence[str]) -> list[str]:
    """The -p options of a command line ("-p NAME", "-pNAME", "-p=NAME"), xdist's left out:
    a rerun runs without it."""
    found, args = [], list(invocation)
    for i, arg in enumerate(args):
        name = None
        if arg == "-p" and i + 1 < len(args):
            name = args[i + 1]
        elif arg.startswith("-p") and arg not in ("-p",) and not arg.startswith("-p-"):
            name = arg[2:].lstrip("=")
        if name and name.removeprefix("no:") != "xdist":
            found += ["-p", name]
    return found


def pytest_args(item: pytest.Item, profile: str, report: Path) -> list[str]:
    """pytest's arguments for one rerun of `item` writing its records to `report`."""
    config = item.config
    args = [item.nodeid, "-q", "-p", "no:cacheprovider", f"--rootdir={config.rootpath}",
            f"--hpml-profile={profile}", f"--hpml-report={report}", "--hpml-confirm=0",
            *passed_options(config.option)]
    if config.inipath:
        args[1:1] = ["-c", str(config.inipath)]
    # The run's own plugin choices (-p no:benchmark hands `benchmark` to pytest-hpml): a rerun
    # that loaded other plugins would measure another fixture, or none.
    invocation = getattr(config, "invocation_params", None)  # absent on a stand-in config
    args += plugin_args(invocation.args if invocation else ())
    if config.pluginmanager.has_plugin("xdist"):
        args += ["-p", "no:xdist"]
    return args


def _forked_pytest(args: list[str], cwd: str, log: str) -> None:
    """A rerun's process body (forked from the forkserver): pytest's output to a log."""
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.chdir(cwd)
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


def run_forked(args: list[str], cwd: Path, log: Path) -> tuple[int, str]:
    context = forkserver()
    if context is None:  # pragma: no cover - platforms without a forkserver
        done = subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd,
                              capture_output=True, text=True, timeout=RERUN_TIMEOUT)
        return done.returncode, done.stdout + done.stderr
    process = context.Process(target=_forked_pytest, args=(args, str(cwd), str(log)),
                              name="hpml-confirm")
    process.start()
    process.join(RERUN_TIMEOUT)
    if process.is_alive():
        process.kill()
        process.join()
        return -9, f"killed after {RERUN_TIMEOUT:g} s"
    output = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    return process.exitcode or 0, output


def rerun(item: pytest.Item, profile: str, runs: int, run: Any = run_forked
          ) -> tuple[list[list[Record]], list[str]]:
    """The test's records from `runs` fresh processes, and what went wrong in any that failed
    (a rerun that fails its own checks confirms nothing)."""
    records, problems = [], []
    with tempfile.TemporaryDirectory(prefix="hpml-confirm-") as folder:
        for i in range(runs):
            report = Path(folder, f"rerun-{i}.json")
            code, output = run(pytest_args(item, profile, report), item.config.rootpath,
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
