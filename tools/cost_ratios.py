"""What a save, a compare and --hpml-compare-ref cost against a plain run, and pytest-hpml's
compare against pytest-benchmark's, on one suite of a team's kind (issue 28): every command a
fresh `python -m pytest` process of the same suite, the commands taking turns in each trial
(the order rotating between trials), whole-process wall times, medians over the trials. Each
process may write Python's bytecode cache, as a user's does (the set-up runs fill it), even
where PYTHONDONTWRITEBYTECODE is set here.

The suite is written for pytest-benchmark's `benchmark` fixture, which both tools serve: 24
benchmarks of different kinds and sizes (torch elementwise and reductions, matmuls, a 2-layer
MLP forward, a tokenizer-like string split, sorts, a size sweep), in a git repository of its
own (--hpml-compare-ref=HEAD needs one), saved once per tool before the trials.

    python tools/cost_ratios.py --trials 5 --out hpml-out/cost
    python tools/cost_ratios.py --trials 3 --rows 10000   # one test of 10k rows instead
    python tools/cost_ratios.py --trials 3 --history 3    # a history of 3 saves

With --rows N the suite is one test that records a time for each of N rows (a sweep of a
team's size), and the commands are a plain run, a save and a compare of it: what a baseline
of N rows costs to write and to read against running the test. Each row times its own work
(a sum over 200 integers, about 2 us here), taken before the row is entered: the row's entry
is the harness's bookkeeping, whose allocations put the collector's pauses in the timed span.
--row-work N makes each row sum N integers instead (5 000: about 0.1 ms here, a small kernel's
call): what the same bookkeeping costs beside a row that does some work.

With --history N, N saves made before the trials (a team's baseline branch, saved on every
push to main) are what each measured save adds to and what pytest-hpml's compare reads
(pytest-benchmark's reads its one saved run, as it has no history). They are made minutes apart,
so the plugin takes them as one occasion (noise.py): they teach the spread between processes,
not the drift of the hours between pushes.

With --before REV, each pytest-hpml command also runs with the plugin at git revision REV (a
worktree put first on PYTHONPATH) in the same trials, taking its turn with the others: what a
change of the plugin did to each cost, measured beside it rather than at another hour. This
checkout is then put first on PYTHONPATH as well, so both sides import alike. REV must read the
baseline files this version writes.

    python tools/cost_ratios.py --trials 7 --rows 10000 --history 3 --before d8ec94b
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from checkouts import worktree  # tools/ is on sys.path when this file runs

ROOT = Path(__file__).resolve().parents[1]

SUITE = '''import re

import pytest
import torch

torch.manual_seed(0)
TEXT = " ".join(f"word{i % 977}" for i in range(20_000))


@pytest.mark.parametrize("n", [10_000, 100_000, 1_000_000])
def test_add(benchmark, n):
    a, b = torch.rand(n), torch.rand(n)
    benchmark(torch.add, a, b)


@pytest.mark.parametrize("n", [10_000, 100_000, 1_000_000])
def test_sum(benchmark, n):
    a = torch.rand(n)
    benchmark(torch.sum, a)


@pytest.mark.parametrize("n", [64, 128, 256])
def test_matmul(benchmark, n):
    a, b = torch.rand(n, n), torch.rand(n, n)
    benchmark(torch.mm, a, b)


@pytest.mark.parametrize("batch", [32, 128, 512])
def test_mlp_forward(benchmark, batch):
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 10))
    x = torch.rand(batch, 784)
    with torch.no_grad():
        benchmark(model, x)


@pytest.mark.parametrize("n", [1_000, 10_000, 100_000])
def test_sort(benchmark, n):
    data = torch.rand(n).tolist()
    benchmark(sorted, data)


@pytest.mark.parametrize("words", [1_000, 5_000, 20_000])
def test_tokenize(benchmark, words):
    text = " ".join(TEXT.split()[:words])
    benchmark(re.findall, r"\\w+", text)


@pytest.mark.parametrize("n", [1_000, 100_000])
def test_softmax(benchmark, n):
    x = torch.rand(16, n // 16)
    benchmark(torch.softmax, x, 1)


@pytest.mark.parametrize("n", [4_096, 65_536])
def test_cumsum(benchmark, n):
    x = torch.rand(n)
    benchmark(torch.cumsum, x, 0)


def test_layer_norm(benchmark):
    x = torch.rand(64, 1024)
    layer = torch.nn.LayerNorm(1024)
    with torch.no_grad():
        benchmark(layer, x)
'''

ROWS_SUITE = '''import time

ROWS = {rows}
WORK = {work}


def test_sweep(hpml):
    for i in range(ROWS):
        if not hpml.wants(size=i):  # a confirmation measures the rows it confirms
            continue
        started = time.perf_counter()
        sum(range(WORK))
        took = time.perf_counter() - started  # the row's work, not the harness's bookkeeping
        with hpml.row(size=i) as row:
            row.record("time", took, unit="s", better="lower")
'''

HPML = ["-p", "no:benchmark"]
BENCH = ["-p", "no:hpml"]


def timed(folder: Path, args: list[str], plugin: Path | None = None
          ) -> tuple[int, float, str]:
    """One `python ARGS` process in `folder`, timed whole: its exit status, seconds and
    output; `plugin`: a checkout whose pytest_hpml it imports."""
    # Python caches the plugin's compiled modules, as on a user's machine: where
    # PYTHONDONTWRITEBYTECODE is set (as on this project's machines), every process would
    # compile the plugin's sources again (0.2-0.4 s here), a cost neither a user's plain run
    # nor their save pays, which brought every ratio nearer 1.
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    if plugin:
        env["PYTHONPATH"] = str(plugin)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, *args], cwd=folder, capture_output=True, text=True,
                          timeout=3600, env=env)
    return done.returncode, time.perf_counter() - started, done.stdout + done.stderr


def _pytest(folder: Path, args: list[str], plugin: Path | None = None
            ) -> tuple[int, float, str]:
    """One run of pytest in `folder` (timed)."""
    return timed(folder, ["-m", "pytest", "-q", "-p", "no:cacheprovider", *args], plugin)


def keep_output(out: Path, name: str, text: str) -> Path:
    """A failing run's output, kept in <out>/runs/NAME.txt: its verdicts are read afterwards,
    not lost with the run."""
    runs = out / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    path = runs / f"{name.replace(' ', '_').replace('/', '_')}.txt"
    path.write_text(text, encoding="utf-8")
    return path


def project(out: Path, suite: str = SUITE) -> Path:
    folder = out / "suite"
    shutil.rmtree(out, ignore_errors=True)
    folder.mkdir(parents=True)
    (folder / "pytest.ini").write_text("[pytest]\n")
    (folder / "test_team.py").write_text(suite)
    (folder / ".gitignore").write_text("baselines/\n.benchmarks/\n")
    git = ["git", "-c", "user.name=cost", "-c", "user.email=cost@localhost"]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "suite"]):
        subprocess.run([*git, *step], cwd=folder, check=True, capture_output=True)
    return folder


COMMANDS = {
    "plain run (pytest-hpml)": HPML,
    "save (pytest-hpml)": [*HPML, "--hpml-save-baseline", "--hpml-baselines=trial"],
    "compare (pytest-hpml)": [*HPML, "--hpml-compare", "--hpml-baselines=baselines"],
    "compare (pytest-benchmark)": [*BENCH, "--benchmark-compare=0001",
                                   "--benchmark-compare-fail=median:10%"],
    "--hpml-compare-ref=HEAD": [*HPML, "--hpml-compare-ref=HEAD"],
    "plain run (pytest-benchmark)": BENCH,
}
RATIOS = [("save (pytest-hpml)", "plain run (pytest-hpml)", 1.5),
          ("compare (pytest-hpml)", "compare (pytest-benchmark)", 1.1),
          ("--hpml-compare-ref=HEAD", "compare (pytest-hpml)", 2.0)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--out", type=Path, default=ROOT / "hpml-out" / "cost")
    parser.add_argument("--rows", type=int, default=0,
                        help="one test of this many rows instead of the team's suite")
    parser.add_argument("--row-work", type=int, default=200, metavar="N",
                        help="with --rows: each row's work is a sum over N integers")
    parser.add_argument("--history", type=int, default=0, metavar="SAVES",
                        help="each measured save adds to a history of this many saves (a team's "
                             "save on a push to main) instead of being the first")
    parser.add_argument("--before", metavar="REV", default=None,
                        help="each pytest-hpml command also with the plugin at git revision "
                             "REV, in the same trials")
    args = parser.parse_args()
    commands, ratios = COMMANDS, RATIOS
    setups = [("pytest-hpml", [*HPML, "--hpml-save-baseline"]),
              ("pytest-benchmark", [*BENCH, "--benchmark-save=base"])]
    if args.rows:
        folder = project(args.out, ROWS_SUITE.format(rows=args.rows, work=args.row_work))
        commands = {name: COMMANDS[name] for name in
                    ("plain run (pytest-hpml)", "save (pytest-hpml)", "compare (pytest-hpml)")}
        ratios = [("save (pytest-hpml)", "plain run (pytest-hpml)", 1.5),
                  ("compare (pytest-hpml)", "plain run (pytest-hpml)", 1.5)]
        setups = setups[:1]
    else:
        folder = project(args.out)
    for name, setup in setups:
        code, _, text = _pytest(folder, setup)
        if code:
            raise SystemExit(f"saving {name}'s baseline failed:\n{text[-3000:]}")
    for _ in range(args.history):  # saves as pushes to main make them (here minutes apart)
        code, _, text = _pytest(folder, [*HPML, "--hpml-save-baseline",
                                         "--hpml-baselines=history"])
        if code:
            raise SystemExit(f"saving the history failed:\n{text[-3000:]}")
    # With --before, this checkout's commands import the plugin through PYTHONPATH too, as
    # REV's do: pytest rewrites the asserts of a plugin imported from a path (its cache then
    # differs from the editable install's), not of the editable install.
    plugins: dict[str, Path | None] = {name: ROOT if args.before else None for name in commands}
    if args.before:
        tree = worktree(args.out.parent / "cost-before", args.before)
        for name in [n for n in commands if commands[n][:2] == HPML]:
            plugins[f"{name}, {args.before}"] = tree
            commands = {**commands, f"{name}, {args.before}": commands[name]}
        ratios = [*ratios, *((f"{top}, {args.before}", f"{bottom}, {args.before}"
                               if f"{bottom}, {args.before}" in commands else bottom, target)
                             for top, bottom, target in ratios)]
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    failed: dict[str, int] = dict.fromkeys(commands, 0)  # runs that exited non-zero
    names = list(commands)
    for trial in range(args.trials):
        shift = trial % len(names)
        for name in names[shift:] + names[:shift]:
            shutil.rmtree(folder / "trial", ignore_errors=True)  # each save its first,
            if args.history:  # or each the next of the same history
                shutil.copytree(folder / "history", folder / "trial")
            command = commands[name]
            if args.history and name.startswith("compare (pytest-hpml)"):
                command = [*HPML, "--hpml-compare", "--hpml-baselines=history"]
            code, took, text = _pytest(folder, command, plugins[name])
            seconds[name].append(took)
            failed[name] += code != 0
            kept = ""
            if code:
                kept = f" (output kept in {keep_output(args.out, f'{trial + 1:02d}-{name}', text)})"
            print(f"trial {trial + 1}/{args.trials} {name:40s} exit {code} in {took:.1f} s"
                  + kept, flush=True)
    # A run of unchanged code that exits non-zero failed a comparison (a false alarm, for the
    # compares) or could not run: counted beside its times, its output kept in <out>/runs/.
    print("\n| command | median s | min s | max s | failed |\n|---|---|---|---|---|")
    for name, took in seconds.items():
        print(f"| {name} | {statistics.median(took):.2f} | {min(took):.2f} | "
              f"{max(took):.2f} | {failed[name]} of {len(took)} |")
    print("\n| ratio | measured | target |\n|---|---|---|")
    for top, bottom, target in ratios:
        ratio = statistics.median(seconds[top]) / statistics.median(seconds[bottom])
        print(f"| {top} / {bottom} | {ratio:.2f} | {target} |")


if __name__ == "__main__":
    main()
