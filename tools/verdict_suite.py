"""The suite mode of tools/verdict_benchmark.py: does --hpml-compare hold on a team's suite over
a working day? Twelve ordinary CPU benchmarks of different kinds and sizes, one save, then
unchanged runs and runs with one benchmark doing 25 % more work, spread over at least
--minutes, for pytest-hpml against its stored baseline, pytest-hpml against the base commit
measured now (--hpml-compare-ref=HEAD), and pytest-benchmark (--benchmark-compare-fail=
median:10%), taking turns in fresh processes on the same machine.

    python tools/verdict_benchmark.py --suite --unchanged 24 --slowed 12 --minutes 20
    python tools/verdict_benchmark.py --suite --unchanged 2 --slowed 1 --minutes 0 \\
        --benchmarks mul-50k dict-10k          # a smoke run: a minute
    python tools/verdict_benchmark.py --suite --before aa8bced   # + the plugin at a commit

Reported per tool: unchanged runs with any false alarm, slowdowns caught (the slowed benchmark
failed), collateral false alarms (other benchmarks failing beside a slowed one), false
improvements and blind spots (pytest-hpml's verdicts), metrics whose detectable change exceeds
50 % without a flag (must be 0), and the seconds an unchanged run takes.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

#: The suite: name -> the body of a factory taking `work` (1.0, or 1.25 when slowed) and
#: returning the call to time. Each scales a dimension its cost is linear in.
BENCHMARKS = {
    "mul-50k": "a, b = torch.rand(n(50_000)), torch.rand(n(50_000))\n"
               "    return lambda: torch.mul(a, b)",
    "sum-8M": "x = torch.rand(n(8_000_000))\n    return lambda: torch.sum(x)",
    "cumsum-1M": "x = torch.rand(n(1_000_000))\n    return lambda: torch.cumsum(x, 0)",
    "mm-128": "a, b = torch.rand(n(128), 128), torch.rand(128, 128)\n"
              "    return lambda: torch.mm(a, b)",
    "mm-512": "a, b = torch.rand(n(512), 512), torch.rand(512, 512)\n"
              "    return lambda: torch.mm(a, b)",
    "softmax-256x1024": "x = torch.rand(n(256), 1024)\n"
                        "    return lambda: torch.softmax(x, dim=1)",
    "layernorm-64x768": "x = torch.rand(n(64), 768)\n"
                        "    return lambda: F.layer_norm(x, (768,))",
    "np-solve-8x64": "rng = np.random.default_rng(0)\n"
                     "    a = rng.random((n(8), 64, 64)) + 64 * np.eye(64)\n"
                     "    b = rng.random((n(8), 64))\n"
                     "    return lambda: np.linalg.solve(a, b[..., None])",
    "dict-10k": "keys = range(n(10_000))\n    return lambda: {i: str(i) for i in keys}",
    "regex-100KB": "text = ('pytest-hpml 2026-01-31 12:34:56 ' * 4000)[:n(100_000)]\n"
                   "    pattern = re.compile(r'\\d{4}-\\d{2}-\\d{2}')\n"
                   "    return lambda: pattern.findall(text)",
    "zlib-256KB": "data = bytes(i * 7919 % 251 for i in range(n(256_000)))\n"
                  "    return lambda: zlib.compress(data, 6)",
    "split-join-50k": "text = ' '.join(str(i) for i in range(n(50_000)))\n"
                      "    return lambda: ' '.join(text.split())",
}
SLOWDOWN = 1.25
#: A detectable change beyond this must be flagged (the plugin's default --hpml-max-detectable).
BLIND_LIMIT = 0.5


def benchmarks_module(names: list[str]) -> str:
    lines = ["import re", "import zlib", "from pathlib import Path", "", "import numpy as np",
             "import torch", "import torch.nn.functional as F", "",
             "# The benchmark named in slow.txt does 25 % more work (its change under test).",
             "SLOW = Path(__file__).with_name('slow.txt').read_text().split()", "", ""]
    for i, name in enumerate(names):
        lines += [f"def make_{i}(work):", "    def n(size):", "        return int(size * work)",
                  "", f"    {BENCHMARKS[name]}", "", ""]
    lines.append("FACTORIES = {" + ", ".join(f"{name!r}: make_{i}"
                                              for i, name in enumerate(names)) + "}")
    lines += ["", "", "def call(name):",
              f"    return FACTORIES[name]({SLOWDOWN} if name in SLOW else 1.0)", ""]
    return "\n".join(lines)


HPML_TEST = """import pytest

from benchmarks import FACTORIES, call


@pytest.mark.parametrize("name", list(FACTORIES))
def test_suite(hpml, name):
    hpml.time(call(name))
"""
BENCHMARK_TEST = """import pytest

from benchmarks import FACTORIES, call


@pytest.mark.parametrize("name", list(FACTORIES))
def test_suite(benchmark, name):
    benchmark(call(name))
"""


@dataclass
class Outcome:
    """What one comparison run found."""

    code: int
    failed: set[str] = field(default_factory=set)  # benchmarks that failed the comparison
    improved: set[str] = field(default_factory=set)
    blind: set[str] = field(default_factory=set)
    unflagged: set[str] = field(default_factory=set)  # detectable > BLIND_LIMIT, no flag


def hpml_outcome(code: int, report: Path, output: str) -> Outcome:
    found = Outcome(code)
    if not report.exists():
        return found
    for record in json.loads(report.read_text())["records"]:
        name = str(record.get("params", {}).get("name"))
        # Reports keep each verdict beside the metrics (pytest-hpml 0.3), or in the metric
        # (0.2, for --before runs of an older commit).
        verdicts = record.get("verdicts") or {m["name"]: m["verdict"]
                                              for m in record["metrics"] if m.get("verdict")}
        for metric, verdict in verdicts.items():
            if metric != "time":
                continue
            if verdict["outcome"] == "regressed":
                found.failed.add(name)
            elif verdict["outcome"] == "improved":
                found.improved.add(name)
            if verdict.get("blind"):
                found.blind.add(name)
            elif (verdict.get("mdc") or 0) > BLIND_LIMIT:
                found.unflagged.add(name)
    return found


def benchmark_outcome(code: int, report: Path, output: str) -> Outcome:
    """pytest-benchmark's failures, from its 'Performance has regressed:' lines."""
    found = Outcome(code)
    tail = output.split("Performance has regressed:", 1)
    if len(tail) == 2:
        found.failed = set(re.findall(r"test_suite\[([^\]]+)\]", tail[1]))
    return found


@dataclass
class SuiteTool:
    name: str
    folder: Path
    save: list[str] | None  # the one save's arguments; None: nothing stored
    compare: list[str]
    outcome: Callable[[int, Path, str], Outcome]
    unchanged: list[Outcome] = field(default_factory=list)
    slowed: list[tuple[str, Outcome]] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # of the unchanged runs
    env: dict[str, str] = field(default_factory=dict)  # beside os.environ (PYTHONPATH)


def git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=verdict-benchmark", "-c",
                    "user.email=verdict-benchmark@localhost", *args], cwd=folder, check=True,
                   capture_output=True)


def make_suite(folder: Path, names: list[str], test: str, repo: bool = False) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text("[pytest]\n")  # this folder is its own rootdir
    (folder / "benchmarks.py").write_text(benchmarks_module(names))
    (folder / "slow.txt").write_text("")
    (folder / "test_suite.py").write_text(test)
    if repo:  # the base commit --hpml-compare-ref measures: nothing slowed
        (folder / ".gitignore").write_text("run.json\n")
        git(folder, "init", "-q")
        git(folder, "add", "-A")
        git(folder, "commit", "-qm", "the suite at its base")
    return folder


def _against_stored(name: str, folder: Path, names: list[str],
                    env: dict[str, str] | None = None) -> SuiteTool:
    """pytest-hpml saving once into `folder`/b and comparing against it."""
    return SuiteTool(name, make_suite(folder, names, HPML_TEST),
                     ["-p", "no:benchmark", "--hpml-save-baseline", f"--hpml-baselines={folder}/b"],
                     ["-p", "no:benchmark", "--hpml-compare", f"--hpml-baselines={folder}/b"],
                     hpml_outcome, env=env or {})


def suite_tools(out: Path, names: list[str], before: tuple[str, Path] | None = None
                ) -> list[SuiteTool]:
    """The tools side by side; `before`: (a revision, a worktree of the plugin at it), whose
    stored-baseline mode is added (the worktree put first on PYTHONPATH)."""
    bench = out / "benchmark"
    earlier = [] if before is None else [_against_stored(
        f"pytest-hpml at {before[0]} (stored baseline)", out / "hpml-before", names,
        {"PYTHONPATH": str(before[1])})]
    return earlier + [
        _against_stored("pytest-hpml (stored baseline)", out / "hpml", names),
        SuiteTool("pytest-hpml (--hpml-compare-ref=HEAD)",
                  make_suite(out / "hpml-ref", names, HPML_TEST, repo=True), None,
                  ["-p", "no:benchmark", "--hpml-compare-ref=HEAD"], hpml_outcome),
        SuiteTool("pytest-benchmark", make_suite(bench, names, BENCHMARK_TEST),
                  ["-p", "no:hpml", "--benchmark-save=base",
                   f"--benchmark-storage={bench}/.benchmarks"],
                  ["-p", "no:hpml", "--benchmark-compare=0001",
                   "--benchmark-compare-fail=median:10%",
                   f"--benchmark-storage={bench}/.benchmarks"], benchmark_outcome),
    ]


def _pytest(tool: SuiteTool, args: list[str], slow: str) -> tuple[Outcome, float, str]:
    (tool.folder / "slow.txt").write_text(slow)
    report = tool.folder / "run.json"
    report.unlink(missing_ok=True)
    extra = [f"--hpml-report={report}"] if tool.outcome is hpml_outcome else []
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "test_suite.py", "-q",
                           "-p", "no:cacheprovider", "--rootdir", str(tool.folder), *args,
                           *extra], cwd=tool.folder, env={**os.environ, **tool.env},
                          capture_output=True, text=True, timeout=3600)
    seconds = time.perf_counter() - started
    text = done.stdout + done.stderr
    return tool.outcome(done.returncode, report, text), seconds, text


def schedule(unchanged: int, slowed: int, names: list[str]) -> list[str]:
    """The conditions in order, "" for unchanged and a benchmark's name for its slowdown:
    slowdowns spread evenly among the unchanged runs, each benchmark slowed in turn."""
    total = unchanged + slowed
    slots = {round((k + 0.5) * total / slowed) for k in range(slowed)} if slowed else set()
    out, k = [], 0
    for i in range(total):
        if i in slots and k < slowed:
            out.append(names[k % len(names)])
            k += 1
        else:
            out.append("")
    return out


def run_suite(out: Path, names: list[str], unchanged: int, slowed: int, minutes: float,
              log: Callable[[str], None] = print, before: tuple[str, Path] | None = None
              ) -> list[SuiteTool]:
    out.mkdir(parents=True, exist_ok=True)
    everyone = suite_tools(out, names, before)
    for tool in everyone:
        if tool.save is not None:
            outcome, _, text = _pytest(tool, tool.save, "")
            if outcome.code != 0:
                raise SystemExit(f"{tool.name}: saving the baseline failed:\n{text[-3000:]}")
    conditions = schedule(unchanged, slowed, names)
    started = time.monotonic()
    for i, slow in enumerate(conditions):
        order = everyone[i % len(everyone):] + everyone[:i % len(everyone)]
        for tool in order:
            outcome, seconds, text = _pytest(tool, tool.compare, slow)
            if outcome.code not in (0, 1):
                raise SystemExit(f"{tool.name} ended with exit code {outcome.code}:\n"
                                 f"{text[-3000:]}")
            if slow:
                tool.slowed.append((slow, outcome))
            else:
                tool.unchanged.append(outcome)
                tool.seconds.append(seconds)
            if outcome.failed or outcome.improved:
                keep = out / "runs" / f"{i + 1:02d}-{slow or 'unchanged'}-{tool.name}.txt"
                keep.parent.mkdir(exist_ok=True)
                keep.write_text(text)
            log(f"run {i + 1}/{len(conditions)} {slow or 'unchanged':16s} {tool.name:38s} "
                f"failed: {sorted(outcome.failed) or '-'} in {seconds:.0f} s")
        # Spread the runs over the working time asked for.
        due = started + (i + 1) * minutes * 60 / len(conditions)
        time.sleep(max(0.0, due - time.monotonic()))
    return everyone


def suite_table(everyone: list[SuiteTool]) -> str:
    rows = ["| tool | unchanged runs with a false alarm | slowdowns caught | collateral false "
            "alarms | false improvements | blind spots flagged | detectable > 50 % unflagged "
            "| s per unchanged run |", "|---|---|---|---|---|---|---|---|"]
    for tool in everyone:
        hpml = tool.outcome is hpml_outcome
        runs = tool.unchanged
        alarms = sum(bool(o.failed) for o in runs)
        caught = sum(name in o.failed for name, o in tool.slowed)
        collateral = sum(len(o.failed - {name}) for name, o in tool.slowed)
        every = runs + [o for _, o in tool.slowed]
        improved = sum(len(o.improved) for o in runs) if hpml else "n/a"
        blind = sum(len(o.blind) for o in every) if hpml else "n/a"
        unflagged = sum(len(o.unflagged) for o in every) if hpml else "n/a"
        seconds = f"{statistics.mean(tool.seconds):.1f}" if tool.seconds else "-"
        rows.append(f"| {tool.name} | {alarms} / {len(runs)} | {caught} / {len(tool.slowed)} "
                    f"| {collateral} | {improved} | {blind} | {unflagged} | {seconds} |")
    return "\n".join(rows)
