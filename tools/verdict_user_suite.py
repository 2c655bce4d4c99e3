"""The user-suite mode of tools/verdict_benchmark.py (issue 33's "done when"): a project's own
suite written for pytest-benchmark (tools/benchmark_user_suite: its options in addopts, its own
`device` fixture, groups, same-named tests in two files, bool extra_info, object parameters,
one bimodal benchmark), run unchanged

- under pytest-hpml (`-p no:benchmark`): a plain run must pass and print its table; saves are
  timed against plain runs, taking turns (the cost of a save on every push to main);
- then compared unchanged, again and again, against the history those saves made (all of one
  commit, as a project's saves of one commit are: a move between them is no new level), taking
  turns with pytest-benchmark (`-p no:hpml`, `--benchmark-compare-fail=median:10%` against its
  one save): every failure is a false alarm.

    python tools/verdict_benchmark.py --user-suite --saves 3 --unchanged 20

Each run is a fresh `python -m pytest` in a copy of the suite of its own (out/hpml,
out/benchmark); the output of each failed compare is kept under out/runs.
"""

from __future__ import annotations

import re
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import verdict_suite  # tools/ is on sys.path when a tool of tools/ runs

SUITE = Path(__file__).resolve().parent / "benchmark_user_suite"
#: The title of the summary table pytest-hpml prints at the end of a run that timed something.
TABLE_TITLE = "hpml summary"


@dataclass
class Run:
    code: int
    seconds: float
    output: str


@dataclass
class Found:
    """What the mode measured."""

    plain: list[float] = field(default_factory=list)
    saves: list[float] = field(default_factory=list)
    benchmark_plain: list[float] = field(default_factory=list)
    compares: dict[str, list[Run]] = field(default_factory=dict)  # tool -> its compares
    failed_tests: dict[str, dict[str, int]] = field(default_factory=dict)  # tool -> test -> n
    table_printed: bool = False


def pytest_run(folder: Path, args: list[str], quiet: bool = True) -> Run:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", *(["-q"] if quiet else []),
                           "-p", "no:cacheprovider",
                           "--rootdir", str(folder), *args], cwd=folder, capture_output=True,
                          text=True, timeout=1800)
    return Run(done.returncode, time.perf_counter() - start, done.stdout + done.stderr)


def copy_suite(folder: Path) -> Path:
    """A copy of the suite, committed to a git repository of its own as a project's is (its
    saves then know the commit they measured)."""
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(SUITE, folder, ignore=shutil.ignore_patterns("__pycache__", ".benchmarks"))
    (folder / ".gitignore").write_text("__pycache__/\n")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "the suite"]):
        verdict_suite.git(folder, *args)
    return folder


def failed_tests(output: str) -> list[str]:
    """The tests a run reports as failed: pytest's short summary (pytest-hpml fails the test),
    and pytest-benchmark's "Performance has regressed:" lines (it fails the session)."""
    failed = re.findall(r"^FAILED (\S+)", output, re.MULTILINE)
    return failed + re.findall(r"^\t(\S+) \(\d+_\w+\) - Field", output, re.MULTILINE)


def _must_pass(what: str, run: Run) -> None:
    if run.code != 0:
        raise SystemExit(f"{what} failed (exit {run.code}):\n{run.output[-3000:]}")


def run_user_suite(out: Path, saves: int, unchanged: int, log=print,
                   commit_each_save: bool = False, save_budget: str | None = None) -> Found:
    """`commit_each_save`: an empty commit before each save after the first, as a team saves
    once per push to main (each save measures another commit of the same code);
    `save_budget`: pytest-hpml's --hpml-save-budget for the saves (None: its default)."""
    hpml_dir, bench_dir = copy_suite(out / "hpml"), copy_suite(out / "benchmark")
    history = out / "hpml-baselines"
    shutil.rmtree(history, ignore_errors=True)
    found = Found()
    hpml = ["-p", "no:benchmark"]
    # Plain runs and saves take turns, so both see the same machine.
    for i in range(saves):
        if commit_each_save and i:
            verdict_suite.git(hpml_dir, "commit", "-q", "--allow-empty", "-m", f"push {i + 1}")
        plain = pytest_run(hpml_dir, hpml, quiet=False)  # as a user runs it: the table shows
        _must_pass("a plain run under pytest-hpml", plain)
        found.table_printed |= TABLE_TITLE in plain.output
        budget = [f"--hpml-save-budget={save_budget}"] if save_budget else []
        save = pytest_run(hpml_dir, [*hpml, "--hpml-save-baseline", *budget,
                                     f"--hpml-baselines={history}"], quiet=False)
        _must_pass("a save under pytest-hpml", save)
        found.plain.append(plain.seconds)
        found.saves.append(save.seconds)
        log(f"save {i + 1}/{saves}: plain run {plain.seconds:.1f} s, save {save.seconds:.1f} s "
            f"({save.seconds / plain.seconds:.2f}x)")
    storage = f"--benchmark-storage={out / 'benchmark-storage'}"
    shutil.rmtree(out / "benchmark-storage", ignore_errors=True)
    base = pytest_run(bench_dir, ["-p", "no:hpml", "--benchmark-save=base", storage])
    _must_pass("pytest-benchmark's save", base)
    found.benchmark_plain.append(base.seconds)
    tools = {
        "pytest-hpml": (hpml_dir, [*hpml, "--hpml-compare", f"--hpml-baselines={history}"]),
        "pytest-benchmark": (bench_dir, ["-p", "no:hpml", "--benchmark-compare=0001",
                                         "--benchmark-compare-fail=median:10%", storage]),
    }
    keep = out / "runs"
    shutil.rmtree(keep, ignore_errors=True)
    for i in range(unchanged):
        order = list(tools) if i % 2 == 0 else list(tools)[::-1]
        for name in order:
            folder, args = tools[name]
            run = pytest_run(folder, args)
            if run.code not in (0, 1):
                raise SystemExit(f"{name} ended with exit code {run.code}:\n"
                                 f"{run.output[-3000:]}")
            found.compares.setdefault(name, []).append(run)
            counts = found.failed_tests.setdefault(name, {})
            for test in failed_tests(run.output):
                counts[test] = counts.get(test, 0) + 1
            if run.code == 1:
                keep.mkdir(parents=True, exist_ok=True)
                (keep / f"{i + 1:02d}-{name}.txt").write_text(run.output)
            log(f"unchanged {i + 1}/{unchanged} {name:17s} "
                f"{'FAILED' if run.code else 'passed'} in {run.seconds:.1f} s"
                + (f": {', '.join(failed_tests(run.output))}" if run.code else ""))
    return found


def user_suite_table(found: Found) -> str:
    ratios = [s / p for s, p in zip(found.saves, found.plain, strict=True)]
    lines = [
        f"plain run under pytest-hpml: median {statistics.median(found.plain):.1f} s; "
        f"save: median {statistics.median(found.saves):.1f} s; save / plain run, each pair: "
        + ", ".join(f"{r:.2f}x" for r in ratios)
        + f" (median {statistics.median(ratios):.2f}x); pytest-benchmark's own save "
        f"{found.benchmark_plain[0]:.1f} s",
        f"summary table printed without --hpml-report: {'yes' if found.table_printed else 'NO'}",
        "",
        "| tool | unchanged compares that failed | tests that failed (times) | s per compare |",
        "|---|---|---|---|",
    ]
    for name, runs in found.compares.items():
        tests = ", ".join(f"{t} ({n})" for t, n in sorted(found.failed_tests[name].items()))
        lines.append(f"| {name} | {sum(r.code == 1 for r in runs)} / {len(runs)} | "
                     f"{tests or '-'} | {statistics.mean(r.seconds for r in runs):.1f} |")
    return "\n".join(lines)
