"""A real baseline history for the dashboard, made on this machine: a small user project of its
own (a git repository with its own pytest.ini, outside this repository) saved again and again
as a team's main branch would be, one commit per save, then a comparison run's report, then
the site.

    python tools/dashboard_demo.py --out hpml-out/dashboard-demo      # about 2 minutes here

The project's suite:
- test_sort, a sweep over the list size (1e3 .. 1e5 items): rows whose times span decades;
- test_tokenize: a commit halfway makes it about twice as fast, and the save after it accepts
  the change (the history starts at the new level, the old one kept as accepted);
- test_noisy_neighbour: each process draws its own speed (what a neighbour's load does to a
  real suite), so a few processes per save cannot pin it down: a blind spot;
- the last run is a comparison (--hpml-compare --hpml-report=run.json) after a commit that
  slows the largest sort: its verdict and the reason for it come from that report.

Prints the commands it runs and where the site is. Nothing here is synthetic: every value is a
timing this machine made in a fresh pytest run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''\
import random

import pytest

from impl import busy, sort_copy, tokenize

TEXT = "the quick brown fox jumps over the lazy dog, " * 40
# Each process draws its own speed: what a noisy neighbour does to a real suite.
NEIGHBOUR = random.uniform(1.0, 4.0)


@pytest.mark.hpml_sweep("n", quick=[1000, 10000, 100000], full=[1000, 10000, 100000])
def test_sort(hpml, n):
    rng = random.Random(n)
    data = [rng.random() for _ in range(n)]
    hpml.time(sort_copy, data)


def test_tokenize(hpml):
    hpml.time(tokenize, TEXT)


def test_noisy_neighbour(hpml):
    hpml.time(busy, int(3000 * NEIGHBOUR))
'''

IMPL = '''\
import re


def sort_copy(data):
    return sorted(data){slow_sort}


def tokenize(text):
{tokenize}


def busy(n):
    total = 0
    for i in range(n):
        total += i
    return total
'''

SLOW_TOKENIZE = '''\
    words = []
    for piece in text.split(" "):
        for word in re.findall(r"\\w+|[^\\w\\s]", piece):
            words.append(word.lower())
    return words'''
FAST_TOKENIZE = '''\
    return re.findall(r"\\w+|[^\\w\\s]", text.lower())'''
#: A regression in the last commit: the largest sort sorts every item twice.
SLOW_SORT = " if len(data) < 50000 else sorted(data * 2)[::2]"


def _git(project: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=dashboard-demo", "-c",
                    "user.email=demo@example.invalid", *args], cwd=project, check=True,
                   capture_output=True)


def _write(project: Path, tokenize: str, slow_sort: str = "") -> None:
    (project / "impl.py").write_text(IMPL.format(tokenize=tokenize, slow_sort=slow_sort))


def _pytest(project: Path, *args: str) -> float:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "--hpml-profile=quick", "--hpml-max-time=0.1", *args]
    print("  $", " ".join(command[1:]), flush=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GITHUB_", "CI_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    started = time.perf_counter()
    done = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
    if done.returncode not in (0, 1):  # 1: the comparison found the regression, as meant
        sys.exit(f"pytest failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return time.perf_counter() - started


def make_history(project: Path, saves: int, accept_at: int, processes: int) -> Path:
    """Saves of the project, one commit each; returns the latest run's report."""
    project.mkdir(parents=True, exist_ok=True)
    (project / "pytest.ini").write_text("[pytest]\n")
    (project / "test_demo.py").write_text(TESTS)
    _write(project, SLOW_TOKENIZE)
    _git(project, "init", "-q")
    _git(project, "add", "-A")
    _git(project, "commit", "-q", "-m", "a suite of three benchmarks")
    for i in range(saves):
        if i == accept_at:
            _write(project, FAST_TOKENIZE)
            _git(project, "commit", "-q", "-am", "tokenize: one regular expression")
        elif i:
            _git(project, "commit", "-q", "--allow-empty", "-m", f"unrelated change {i}")
        took = _pytest(project, "--hpml-save-baseline",
                       f"--hpml-baseline-processes={processes}")
        print(f"save {i + 1} of {saves}: {took:.1f} s", flush=True)
    _write(project, FAST_TOKENIZE, SLOW_SORT)
    _git(project, "commit", "-q", "-am", "sort: every item twice (a regression)")
    report = project / "run.json"
    took = _pytest(project, "--hpml-compare", f"--hpml-report={report}")
    print(f"comparison run: {took:.1f} s", flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("hpml-out/dashboard-demo"),
                        help="the site's folder (default hpml-out/dashboard-demo)")
    parser.add_argument("--saves", type=int, default=10)
    parser.add_argument("--accept-at", type=int, default=5,
                        help="the save (counted from 0) after the faster tokenizer's commit")
    parser.add_argument("--processes", type=int, default=3,
                        help="processes per save (--hpml-baseline-processes)")
    parser.add_argument("--project", type=Path, default=None,
                        help="keep the project here (default: a temporary folder, removed)")
    args = parser.parse_args(argv)
    project = args.project or Path(tempfile.mkdtemp(prefix="hpml-dashboard-demo-"))
    try:
        report = make_history(project, args.saves, args.accept_at, args.processes)
        baselines = project / "baselines"
        command = [sys.executable, "-m", "pytest_hpml", "dashboard", str(baselines),
                   "--report", str(report), "-o", str(args.out)]
        print("  $", " ".join(command[1:]), flush=True)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        if args.project:
            print(f"project kept in {project}")
        return subprocess.run(command, env=env).returncode
    finally:
        if args.project is None:
            shutil.rmtree(project, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
