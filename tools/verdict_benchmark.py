"""Does --hpml-compare fail on a real slowdown and never on noise? Measured against the tool a
user would otherwise pick, pytest-benchmark, on the same user suite, in fresh processes,
interleaved.

The user suite times a 2-million-element torch add (the README's basic example). A baseline is
saved once per tool; then each trial compares, per tool, two identical runs (A/A: every failure
is a false alarm), a run with 20 % more work and one with 50 % more work (every failure is a
catch). Each comparison is a fresh `python -m pytest` process; the tools take turns within a
trial, and which goes first alternates between trials, so both see the same machine.

    python tools/verdict_benchmark.py --trials 10 --out hpml-out/verdicts
    python tools/verdict_benchmark.py --trials 10 --before 2a74992   # + the plugin at a commit
    python tools/verdict_benchmark.py --trials 10 --workload slow-tail  # a tenth of calls 10x
    python tools/verdict_benchmark.py --suite --minutes 20            # a suite over a day
    python tools/verdict_benchmark.py --user-suite --unchanged 20     # a pytest-benchmark suite

--suite runs the suite mode (tools/verdict_suite.py): twelve benchmarks, one save, unchanged
runs and 25 % slowdowns spread over --minutes, with the base-ref mode beside the stored
baseline and pytest-benchmark.

pytest-benchmark's side: --benchmark-compare-fail=median:10% (the same 10 % the plugin's
default tolerance uses). `--before REV` adds a column for pytest-hpml at git revision REV (a
worktree put first on PYTHONPATH), with the suite as a user of that version wrote it; in the
suite mode, that version against its stored baseline.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import verdict_suite  # tools/ is on sys.path when this file runs
import verdict_user_suite
from checkouts import worktree

ROOT = Path(__file__).resolve().parents[1]
CONDITIONS = [("A/A", 1.0), ("A/A", 1.0), ("+20 % work", 1.2), ("+50 % work", 1.5)]

COMMON = '''import os

import torch

N = 2_000_000
WORK = float(os.environ.get("HPML_BENCH_WORK", "1"))
a, b = torch.rand(int(N * WORK)), torch.rand(int(N * WORK))
'''
HPML_SUITE = COMMON + '''

def test_torch_add(hpml):
    t = hpml.time(torch.add, a, b)
    hpml.record_bandwidth("bandwidth", 3 * 4 * N, t)  # the nominal bytes: more work is slower
'''
# --workload slow-tail: allocating, adding and summing 2M floats, whose slowest tenth of calls
# (fresh pages from the allocator) take ten times the others (issue 33 item 9).
SLOW_TAIL = '''

def work():
    return (torch.rand(a.numel()) + b).sum()
'''
SLOW_TAIL_HPML = COMMON + SLOW_TAIL + '''

def test_slow_tail(hpml):
    hpml.time(work)
'''
SLOW_TAIL_BENCHMARK = COMMON + SLOW_TAIL + '''

def test_slow_tail(benchmark):
    benchmark(work)
'''
# The suite as a user of the earlier plugin wrote it (no derived-metric API there).
HPML_SUITE_BEFORE = COMMON + '''

def test_torch_add(hpml):
    t = hpml.time(torch.add, a, b)
    hpml.record("bandwidth", 3 * 4 * N / t.median, unit="B/s", better="higher")
'''
BENCHMARK_SUITE = COMMON + '''

def test_torch_add(benchmark):
    benchmark(torch.add, a, b)
'''


@dataclass
class Tool:
    name: str
    folder: Path
    save: list[str]
    compare: list[str]
    env: dict[str, str] = field(default_factory=dict)
    outcomes: dict[str, list[bool]] = field(default_factory=dict)  # condition -> failed?
    seconds: list[float] = field(default_factory=list)


def _pytest(tool: Tool, args: list[str], work: float) -> tuple[int, float, str]:
    env = {**os.environ, **tool.env, "HPML_BENCH_WORK": str(work)}
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", str(tool.folder), "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tool.folder), *args],
                          cwd=tool.folder, env=env, capture_output=True, text=True,
                          timeout=900)
    return done.returncode, time.perf_counter() - start, done.stdout + done.stderr


def _suite(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n")  # this folder is its own rootdir
    (folder / name).write_text(source)
    return folder


WORKLOADS = {"add": (HPML_SUITE, BENCHMARK_SUITE), "slow-tail": (SLOW_TAIL_HPML,
                                                                  SLOW_TAIL_BENCHMARK)}


def tools(out: Path, before: str | None, workload: str = "add",
          save_budget: str | None = None) -> list[Tool]:
    hpml_suite, benchmark_suite = WORKLOADS[workload]
    budget = [f"--hpml-save-budget={save_budget}"] if save_budget else []
    found = [
        Tool("pytest-hpml", _suite(out / "hpml", "test_user.py", hpml_suite),
             ["-p", "no:benchmark", "--hpml-save-baseline", f"--hpml-baselines={out}/hpml/b",
              *budget],
             ["-p", "no:benchmark", "--hpml-compare", f"--hpml-baselines={out}/hpml/b"]),
        Tool("pytest-benchmark", _suite(out / "benchmark", "test_user_bench.py",
                                        benchmark_suite),
             ["-p", "no:hpml", "--benchmark-save=base",
              f"--benchmark-storage={out}/benchmark/.benchmarks"],
             ["-p", "no:hpml", "--benchmark-compare=0001",
              "--benchmark-compare-fail=median:10%",
              f"--benchmark-storage={out}/benchmark/.benchmarks"]),
    ]
    if before:
        tree = worktree(out, before)
        found.append(Tool(f"pytest-hpml ({before})",
                          _suite(out / "before", "test_user.py",
                                 HPML_SUITE_BEFORE if workload == "add" else hpml_suite),
                          ["-p", "no:benchmark", "--hpml-save-baseline",
                           f"--hpml-baselines={out}/before/b"],
                          ["-p", "no:benchmark", "--hpml-compare",
                           f"--hpml-baselines={out}/before/b"],
                          env={"PYTHONPATH": str(tree)}))
    return found


def run(out: Path, trials: int, before: str | None, log=print, workload: str = "add",
        save_budget: str | None = None) -> list[Tool]:
    if out.exists():
        shutil.rmtree(out / "runs", ignore_errors=True)
        shutil.rmtree(out / "hpml", ignore_errors=True)
        shutil.rmtree(out / "benchmark", ignore_errors=True)
        shutil.rmtree(out / "before", ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    everyone = tools(out, before, workload, save_budget)
    for tool in everyone:
        code, _, text = _pytest(tool, tool.save, 1.0)
        if code != 0:
            raise SystemExit(f"{tool.name}: saving the baseline failed:\n{text[-2000:]}")
    for trial in range(trials):
        order = everyone if trial % 2 == 0 else everyone[::-1]
        for condition, work in CONDITIONS:
            for tool in order:
                name = f"{trial + 1:02d}-{condition}-{tool.name}"
                keep = out / "runs" / "".join(c if c.isalnum() or c in "-." else "_"
                                              for c in name)
                keep.parent.mkdir(exist_ok=True)
                # pytest-hpml's JSON report holds every process's value and each verdict's
                # basis: the evidence a miss or a false alarm rested on.
                report = [f"--hpml-report={keep}.json"] if "--hpml-compare" in tool.compare \
                    else []
                code, seconds, text = _pytest(tool, [*tool.compare, *report], work)
                if code not in (0, 1):
                    raise SystemExit(f"{tool.name} ended with exit code {code}:\n"
                                     f"{text[-2000:]}")
                tool.outcomes.setdefault(condition, []).append(code == 1)
                # Every run's output is kept: why it failed (a false alarm's basis), and why a
                # slowdown passed (a miss's basis) are both read from it.
                outcome = "failed" if code == 1 else "passed"
                keep.with_name(f"{keep.name}-{outcome}.txt").write_text(text)
                tool.seconds.append(seconds)
                log(f"trial {trial + 1}/{trials} {condition:11s} {tool.name:24s} "
                    f"{'FAILED' if code else 'passed'} in {seconds:.1f} s")
    return everyone


def table(everyone: list[Tool]) -> str:
    rows = ["| tool | A/A false alarms | +20 % work caught | +50 % work caught | s per run |",
            "|---|---|---|---|---|"]
    for tool in everyone:
        counts = [f"{sum(runs)} / {len(runs)}" for runs in (
            tool.outcomes.get(c, []) for c in ("A/A", "+20 % work", "+50 % work"))]
        rows.append(f"| {tool.name} | {' | '.join(counts)} | "
                    f"{statistics.mean(tool.seconds):.1f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "hpml-out" / "verdicts")
    parser.add_argument("--before", metavar="REV", default=None,
                        help="also run pytest-hpml at this git revision (a worktree)")
    parser.add_argument("--workload", choices=list(WORKLOADS), default="add",
                        help="add: a 2M-element torch add; slow-tail: allocate, add and sum 2M "
                             "floats, a tenth of the calls ten times slower (add)")
    parser.add_argument("--save-budget", default=None,
                        help="pytest-hpml's --hpml-save-budget for its saves (default: the "
                             "plugin's, 0.4 of the run's time; all: every fresh process)")
    suite = parser.add_argument_group("suite mode")
    suite.add_argument("--suite", action="store_true",
                       help="a suite of twelve benchmarks over a working day (verdict_suite.py)")
    suite.add_argument("--unchanged", type=int, default=24, help="unchanged runs (24)")
    suite.add_argument("--slowed", type=int, default=12,
                       help="runs with one benchmark doing 25 %% more work (12)")
    suite.add_argument("--minutes", type=float, default=20.0,
                       help="spread the runs over at least this long (20)")
    suite.add_argument("--benchmarks", nargs="+", choices=list(verdict_suite.BENCHMARKS),
                       default=list(verdict_suite.BENCHMARKS), metavar="NAME",
                       help="a part of the suite (a smoke run)")
    user = parser.add_argument_group("user-suite mode")
    user.add_argument("--user-suite", action="store_true",
                      help="a project's suite written for pytest-benchmark, run unchanged "
                           "(tools/benchmark_user_suite, verdict_user_suite.py)")
    user.add_argument("--saves", type=int, default=3,
                      help="saves, each beside a plain run (their cost), that make the history "
                           "the unchanged compares judge against (3)")
    user.add_argument("--commit-each-save", action="store_true",
                      help="an empty commit before each save after the first (saves of "
                           "different commits, as on every push to main)")
    args = parser.parse_args()
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        raise SystemExit("pytest-benchmark is not installed: pip install pytest-benchmark") \
            from None
    if args.user_suite:
        out = args.out if args.out != parser.get_default("out") else ROOT / "hpml-out" / "user"
        found = verdict_user_suite.run_user_suite(out, args.saves, args.unchanged,
                                                  commit_each_save=args.commit_each_save,
                                                  save_budget=args.save_budget)
        print()
        print(verdict_user_suite.user_suite_table(found))
        return
    if args.suite:
        out = args.out if args.out != parser.get_default("out") else ROOT / "hpml-out" / "suite"
        shutil.rmtree(out, ignore_errors=True)
        everyone = verdict_suite.run_suite(out, args.benchmarks, args.unchanged, args.slowed,
                                           args.minutes, before=(args.before, worktree(
                                               out, args.before)) if args.before else None)
        print()
        print(verdict_suite.suite_table(everyone))
        return
    everyone = run(args.out, args.trials, args.before, workload=args.workload,
                   save_budget=args.save_budget)
    print()
    print(table(everyone))


if __name__ == "__main__":
    main()
