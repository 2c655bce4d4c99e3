"""Confirmation runs: a test whose metric looks regressed is measured again in fresh processes
before the verdict is final, so a CI failure means something. The cost is paid only where a
regression is suspected.

A rerun is `python -m pytest <nodeid>` in the test's rootdir with the run's own --hpml-*
options (profile, timing policy, data root ...) and a JSON report; its records are read back.
Fresh processes, because the noise that fools a comparison lives between processes (allocator
state, thread placement, clocks), where samples of one process cannot see it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pytest_hpml.results import Record

#: Options that belong to the outer run only (outputs, baselines, confirmation itself).
NOT_PASSED = {"hpml_report", "hpml_export_benchmark_action", "hpml_export_bencher",
              "hpml_plots", "hpml_compare", "hpml_save_baseline", "hpml_reset_baseline",
              "hpml_baselines", "hpml_baseline_runs", "hpml_confirm", "hpml_profile"}
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


def rerun_command(item: pytest.Item, profile: str, report: Path) -> list[str]:
    config = item.config
    command = [sys.executable, "-m", "pytest", item.nodeid, "-q", "-p", "no:cacheprovider",
               f"--rootdir={config.rootpath}", f"--hpml-profile={profile}",
               f"--hpml-report={report}", "--hpml-confirm=0", *passed_options(config.option)]
    if config.inipath:
        command[4:4] = ["-c", str(config.inipath)]
    if config.pluginmanager.has_plugin("xdist"):
        command += ["-p", "no:xdist"]
    return command


def rerun(item: pytest.Item, profile: str, runs: int,
          run: Any = subprocess.run) -> tuple[list[list[Record]], list[str]]:
    """The test's records from `runs` fresh processes, and what went wrong in any that failed
    (a rerun that fails its own checks confirms nothing)."""
    records, problems = [], []
    with tempfile.TemporaryDirectory(prefix="hpml-confirm-") as folder:
        for i in range(runs):
            report = Path(folder, f"rerun-{i}.json")
            done = run(rerun_command(item, profile, report), cwd=item.config.rootpath,
                       capture_output=True, text=True, timeout=RERUN_TIMEOUT)
            if done.returncode != 0 or not report.exists():
                tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
                problems.append(f"rerun {i + 1} exited {done.returncode}: " + " | ".join(tail))
                continue
            document = json.loads(report.read_text(encoding="utf-8"))
            records.append([Record.from_dict(r) for r in document["records"]])
    return records, problems


def values_by_metric(reruns: list[list[Record]], record_id: str) -> dict[str, list[float]]:
    """{metric name: its value in each rerun} for one row."""
    out: dict[str, list[float]] = {}
    for records in reruns:
        for record in records:
            if record.id == record_id:
                for m in record.metrics:
                    out.setdefault(m.name, []).append(m.value)
    return out
