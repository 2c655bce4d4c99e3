"""Proves every GPU path of pytest-hpml and its labs in one go, on a machine with one GPU (an
H100) and about 50 minutes, in stages:

    install          pip install --no-deps -e . over the machine's own torch, and what is missing
    smoke            each CUDA piece once (tools/gpu_smoke.py): events, busy-wait, cold L2,
                     NVML clocks, unified memory, pinned copies, the handout's CUDA C++ program
    quick-<lab>      -m "gpu and <lab>" in the quick profile, one stage per lab
    full-vector_add  the vector-add lab's GPU tests in the full profile (K up to 100 million)
    full-int8_gemm   the int8 GEMM's throughput at 4096^3 and 8192^3, and its epilogues
    full-mlp_profile the MLP training step's profile on the GPU in the full profile
    ci-vector_add    the CI promise on the GPU: the vector-add lab's GPU tests saved as a
                     baseline (its fresh processes included), then compared twice, unchanged:
                     each compare must pass (a false alarm on a GPU fails the stage)

Each stage runs in a process of its own under a time budget (killed past it, and said so) and
writes under OUT/<stage>/: output.txt (everything it printed), report.md and junit.xml (pytest
stages; quick and full stages also their charts in plots/). OUT/summary.md and summary.json
say what passed, was skipped or failed, and why. Without a GPU every stage is skipped, with the
reason, in seconds.

    python tools/gpu_proof.py --out $OUT                       # every stage, 50 minutes
    python tools/gpu_proof.py --out $OUT --stages install,smoke --minutes 9
    python tools/gpu_proof.py --list                           # the stages and their budgets

--stages takes names or prefixes ("quick" is every quick-<lab> stage). The exit status is 1
when a stage failed (or, with --require-gpu, when there is no GPU), else 0.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_MINUTES = 50.0
LABS = {"vector_add": 150, "complexity": 150, "mlp": 180, "quantization": 240, "tta": 240,
        "data_parallel": 240}
#: What the stages import: the plugin's own dependencies, then the labs' (tools/gpu_proof
#: installs with --no-deps, over what the machine has).
NEEDED = ("pytest", "tabulate", "numpy", "torch", "triton", "torchvision", "setuptools")
WANTED = {"pynvml": "nvidia-ml-py: SM clock, utilization, throttle check",
          "matplotlib": "charts", "xdist": "pytest-xdist: -n"}


@dataclass(frozen=True)
class Stage:
    name: str
    budget: float  # seconds
    what: str
    pytest_args: tuple[str, ...] = ()  # empty: not a pytest stage
    plots: bool = False
    compares: int = 0  # a CI stage: a save, then this many compares of unchanged code


STAGES = [
    Stage("install", 120, "pip install --no-deps -e . over the machine's torch (no network)"),
    Stage("smoke", 240, "each CUDA piece once (tools/gpu_smoke.py)",
          ("tools/gpu_smoke.py", "--hpml-profile=quick")),
    *(Stage(f"quick-{lab}", budget, f'-m "gpu and {lab}", quick profile',
            ("suites", "-m", f"gpu and {lab}", "--hpml-profile=quick"), plots=True)
      for lab, budget in LABS.items()),
    Stage("full-vector_add", 540, "the vector-add lab on the GPU, full profile",
          ("suites/vector_add", "-m", "gpu", "--hpml-profile=full"), plots=True),
    Stage("full-int8_gemm", 360, "int8 GEMM throughput at 4096^3 and 8192^3, its epilogues",
          ("suites/quantization/test_quantization_benchmark.py", "--hpml-profile=full", "-k",
           "(square and (4096 or 8192)) or epilogue_cost"), plots=True),
    Stage("full-mlp_profile", 240, "the MLP training step's profile on the GPU, full profile",
          ("suites/mlp/test_mlp_profile.py", "-m", "gpu", "--hpml-profile=full"), plots=True),
    Stage("ci-vector_add", 300, "save the vector-add lab's GPU tests, compare twice unchanged",
          ("suites/vector_add", "-m", "gpu", "--hpml-profile=quick"), compares=2),
]


@dataclass
class Outcome:
    stage: str
    outcome: str  # "passed", "skipped" or "failed"
    why: str = ""
    seconds: float = 0.0
    tests: dict[str, int] = field(default_factory=dict)  # passed / skipped / failed


# -- the machine ---------------------------------------------------------------------------------

PROBE = ("import torch; ok = torch.cuda.is_available(); print(ok, torch.__version__, "
         "torch.version.cuda, torch.cuda.get_device_name(0) if ok else '-', sep='|')")


def gpu_here(python: str = sys.executable) -> tuple[bool, str]:
    """(whether torch can use a CUDA GPU here, what was found), asked in a child process."""
    try:
        out = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, timeout=180)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"torch could not be asked ({exc})"
    last = (out.stdout.strip().splitlines() or [""])[-1].split("|")
    if out.returncode != 0 or len(last) != 4:
        error = (out.stderr.strip().splitlines() or ["no output"])[-1]
        return False, f"torch does not import ({error})"
    ok, version, cuda, name = last
    if ok != "True":
        built = f"built for CUDA {cuda}" if cuda != "None" else "a CPU-only build"
        return False, f"no CUDA GPU: torch {version} ({built}) sees none"
    return True, f"{name}, torch {version} (CUDA {cuda})"


def missing_modules(names: tuple[str, ...] | list[str]) -> list[str]:
    code = ("import importlib.util, sys; print(' '.join(n for n in sys.argv[1:] "
            "if importlib.util.find_spec(n) is None))")
    out = subprocess.run([sys.executable, "-c", code, *names], capture_output=True, text=True,
                         timeout=120)
    return out.stdout.split()


# -- running a stage -----------------------------------------------------------------------------

def run_logged(command: list[str], log: Path, timeout: float) -> tuple[int | None, float]:
    """Run `command` in ROOT, its output into `log`; (exit status, seconds). None: killed at
    `timeout`, with everything it started (its own process group)."""
    started = time.monotonic()
    with log.open("w") as sink:
        sink.write("$ " + " ".join(command) + "\n")
        sink.flush()
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            code: int | None = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = None
    return code, time.monotonic() - started


def junit_counts(path: Path) -> tuple[dict[str, int], list[str]]:
    """(passed / skipped / failed counts, distinct skip reasons) of a junit XML file."""
    counts = {"passed": 0, "skipped": 0, "failed": 0}
    reasons: list[str] = []
    if not path.exists():
        return counts, reasons
    for case in ET.parse(path).getroot().iter("testcase"):
        skipped = case.find("skipped")
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif skipped is not None:
            counts["skipped"] += 1
            reason = skipped.get("message", "").removeprefix("Skipped: ")
            if reason and reason not in reasons:
                reasons.append(reason)
        else:
            counts["passed"] += 1
    return counts, reasons


def run_pytest_stage(stage: Stage, folder: Path, timeout: float) -> Outcome:
    command = [sys.executable, "-m", "pytest", *stage.pytest_args, "-p", "no:cacheprovider",
               f"--junitxml={folder / 'junit.xml'}", f"--hpml-report={folder / 'report.md'}"]
    if stage.plots:
        command.append(f"--hpml-plots={folder / 'plots'}")
    code, seconds = run_logged(command, folder / "output.txt", timeout)
    counts, reasons = junit_counts(folder / "junit.xml")
    outcome = Outcome(stage.name, "passed", seconds=seconds, tests=counts)
    if code is None:
        outcome.outcome, outcome.why = "failed", f"killed at its budget of {timeout:.0f} s"
    elif counts["failed"] or code not in (0, 5):
        outcome.outcome = "failed"
        outcome.why = f"{counts['failed']} test(s) failed (exit status {code}): see output.txt"
    elif code == 5 or not counts["passed"] + counts["skipped"]:
        outcome.outcome, outcome.why = "failed", "no test was selected"
    elif not counts["passed"]:
        outcome.outcome, outcome.why = "skipped", "every test skipped: " + "; ".join(reasons)
    return outcome


def verdicts(csv_report: Path) -> dict[str, int]:
    """How many metrics of a CSV report got each verdict."""
    counts: dict[str, int] = {}
    if csv_report.exists():
        with csv_report.open(newline="") as stream:
            for row in csv.DictReader(stream):
                if row.get("verdict"):
                    counts[row["verdict"]] = counts.get(row["verdict"], 0) + 1
    return counts


def run_ci_stage(stage: Stage, folder: Path, timeout: float) -> Outcome:
    """What CI on a GPU runner does, on unchanged code: a save (with the fresh processes a save
    runs), then `stage.compares` compares against it. A compare that fails is a false alarm:
    the code did not change. Each step writes <step>.md and <step>.csv (the verdicts)."""
    deadline = time.monotonic() + timeout
    baselines = folder / "baselines"
    folder.mkdir(parents=True, exist_ok=True)
    steps = [("save", "--hpml-save-baseline")] + [
        (f"compare-{i + 1}", "--hpml-compare") for i in range(stage.compares)]
    outcome = Outcome(stage.name, "passed")
    notes = []
    for step, option in steps:
        left = deadline - time.monotonic()
        if left < 10:
            outcome.outcome = "failed"
            notes.append(f"{step}: not run, the stage's {timeout:.0f} s were spent")
            break
        command = [sys.executable, "-m", "pytest", *stage.pytest_args, "-p", "no:cacheprovider",
                   option, f"--hpml-baselines={baselines}",
                   f"--hpml-report={folder / (step + '.md')}",
                   f"--hpml-report={folder / (step + '.csv')}"]
        code, seconds = run_logged(command, folder / f"{step}.txt", left)
        outcome.seconds += seconds
        said = ", ".join(f"{n} {v}" for v, n in sorted(verdicts(folder / f"{step}.csv").items()))
        notes.append(f"{step}: exit {code if code is not None else 'killed'} in {seconds:.0f} s"
                     + (f" ({said})" if said else ""))
        if code != 0:
            outcome.outcome = "failed"
            if step == "save":
                break
    outcome.why = "; ".join(notes)
    return outcome


def collected(stage: Stage, folder: Path) -> str:
    """How many tests the stage's selection collects (no GPU needed: the GPU tests are
    collected, then skipped)."""
    command = [sys.executable, "-m", "pytest", *stage.pytest_args, "--collect-only", "-q",
               "-p", "no:cacheprovider"]
    code, _ = run_logged(command, folder / "collected.txt", 600)
    lines = (folder / "collected.txt").read_text().strip().splitlines()
    last = lines[-1] if lines else ""
    return last.split(" in ")[0] if code == 0 else f"collection failed (exit status {code})"


def run_install(stage: Stage, folder: Path, timeout: float) -> Outcome:
    """pip install --no-deps -e . (the machine's torch stays), then what the stages import.
    No build isolation: an isolated build fetches setuptools, and a GPU machine may have no
    network; the machine's own setuptools builds the editable install."""
    before = gpu_here()[1]
    code, seconds = run_logged([sys.executable, "-m", "pip", "install", "--no-deps",
                                "--no-build-isolation", "--disable-pip-version-check", "-e",
                                str(ROOT)], folder / "output.txt", timeout)
    if code != 0:
        why = "killed at its budget" if code is None else f"pip exit status {code}"
        return Outcome(stage.name, "failed", f"{why}: see output.txt (the editable install "
                       "needs setuptools >= 68 on the machine)", seconds)
    missing = missing_modules(list(NEEDED) + list(WANTED))
    after = gpu_here()[1]
    notes = [f"torch before: {before}; after: {after}"]
    notes += [f"{name} missing ({why})" for name, why in WANTED.items() if name in missing]
    needed = [name for name in NEEDED if name in missing]
    with (folder / "output.txt").open("a") as log:
        log.write("\n".join(notes) + "\n")
    if needed or before != after:
        why = (f"missing: {', '.join(needed)} (bring wheels: the machine may have no network)"
               if needed else "the install changed torch")
        return Outcome(stage.name, "failed", f"{why}; {'; '.join(notes)}", seconds)
    return Outcome(stage.name, "passed", "; ".join(notes), seconds)


# -- the whole proof -----------------------------------------------------------------------------

def selected(names: str | None) -> list[Stage]:
    if not names:
        return list(STAGES)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in wanted if not any(s.name.startswith(n) for s in STAGES)]
    if unknown:
        raise SystemExit(f"gpu_proof: no stage called {', '.join(unknown)}; the stages: "
                         f"{', '.join(s.name for s in STAGES)}")
    return [s for s in STAGES if any(s.name.startswith(n) for n in wanted)]


def prove(out: Path, stages: list[Stage], minutes: float, has_gpu: bool,
          found: str, collect: bool = False) -> list[Outcome]:
    """Each stage in turn, under its budget and within `minutes` in all. Without a GPU each is
    skipped; `collect`: the pytest stages say how many tests they would run."""
    deadline = time.monotonic() + 60 * minutes
    outcomes = []
    for stage in stages:
        folder = out / stage.name
        folder.mkdir(parents=True, exist_ok=True)
        left = deadline - time.monotonic()
        if not has_gpu:
            outcome = Outcome(stage.name, "skipped", found)
            if collect and stage.pytest_args:
                outcome.why += f"; would run: {collected(stage, folder)}"
        elif left < 30:
            outcome = Outcome(stage.name, "skipped", f"the {minutes:g} minutes were spent")
        elif stage.name == "install":
            outcome = run_install(stage, folder, min(stage.budget, left))
        elif stage.compares:
            outcome = run_ci_stage(stage, folder, min(stage.budget, left))
        else:
            outcome = run_pytest_stage(stage, folder, min(stage.budget, left))
        (folder / "outcome.json").write_text(json.dumps(asdict(outcome), indent=2) + "\n")
        print(f"gpu_proof: {stage.name}: {outcome.outcome} ({outcome.seconds:.0f} s)"
              + (f": {outcome.why}" if outcome.why else ""), flush=True)
        outcomes.append(outcome)
    return outcomes


def summary(outcomes: list[Outcome], found: str) -> str:
    lines = ["# GPU proof", "", f"Machine: {found}", "",
             "| stage | outcome | tests passed / skipped / failed | seconds | why |",
             "|---|---|---|---|---|"]
    for o in outcomes:
        tests = "/".join(str(o.tests.get(k, 0)) for k in ("passed", "skipped", "failed")) \
            if o.tests else ""
        why = o.why.replace("|", "\\|").replace("\n", " ")
        lines.append(f"| {o.stage} | {o.outcome} | {tests} | {o.seconds:.0f} | {why} |")
    totals = {k: sum(o.outcome == k for o in outcomes) for k in ("passed", "skipped", "failed")}
    lines += ["", ", ".join(f"{n} {k}" for k, n in totals.items()) + " stage(s)"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("hpml-out/gpu-proof"),
                        help="the folder every stage writes under")
    parser.add_argument("--stages", help="comma-separated names or prefixes (default: all)")
    parser.add_argument("--minutes", type=float, default=DEFAULT_MINUTES,
                        help="the whole proof's time; a stage gets its budget or what is left")
    parser.add_argument("--require-gpu", action="store_true",
                        help="exit 1 when there is no GPU (a CI job that landed on a CPU)")
    parser.add_argument("--list", action="store_true", help="print the stages and stop")
    parser.add_argument("--collect", action="store_true",
                        help="without a GPU, collect each pytest stage's tests and say how many "
                             "it would run (a check of the selections, about 10 s a stage)")
    args = parser.parse_args(argv)
    stages = selected(args.stages)
    if args.list:
        for stage in stages:
            print(f"{stage.name:20} {stage.budget:5.0f} s  {stage.what}")
        print(f"{'':20} {sum(s.budget for s in stages):5.0f} s  in all")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    has_gpu, found = gpu_here()
    print(f"gpu_proof: {found}", flush=True)
    outcomes = prove(args.out, stages, args.minutes, has_gpu, found, args.collect)
    text = summary(outcomes, found)
    (args.out / "summary.md").write_text(text)
    (args.out / "summary.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=2)
                                           + "\n")
    print(text, end="")
    failed = any(o.outcome == "failed" for o in outcomes)
    return 1 if failed or (args.require_gpu and not has_gpu) else 0


if __name__ == "__main__":
    sys.exit(main())
