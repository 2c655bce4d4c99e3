"""The compile run: every Triton kernel of the labs compiled for the A100 (sm_80) and the H100
(sm_90), no GPU needed (the suites' test_*_compiled.py), its wall time, and what the compiled
variants use, one line per kernel x arithmetic x target, as a Markdown table.

    python tools/compile_matrix.py --profile full -n 2      # every config the autotuners see
    python tools/compile_matrix.py --profile quick          # what make test compiles
    python tools/compile_matrix.py --from-report run.json   # the table of a run already made

Triton's cache is a fresh folder unless --warm (then TRITON_CACHE_DIR or ~/.triton/cache), so
the wall time is that of a runner that has never compiled these kernels. The arithmetic is the
tiled matmul's tf32 or IEEE fp32, the int8 GEMM's epilogue, the vector add's fp32.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from pytest_hpml import Record, read_results

ROOT = Path(__file__).resolve().parents[1]
TESTS = ("suites/vector_add/test_vector_add_compiled.py",
         "suites/mlp/test_mlp_tiled_matmul_compiled.py",
         "suites/quantization/test_quantization_int8_gemm_compiled.py")


def arithmetic(record: Record) -> str:
    params = record.params
    if "math" in params:
        return str(params["math"])
    if "gemm" in params and " " in str(params["gemm"]):
        return str(params["gemm"]).split()[1]  # "square-4096 requantize"
    return "fp32"


def value(record: Record, name: str) -> float:
    metric = record.metric(name)
    return float(metric.value) if metric is not None else float("nan")


def span(values: list[float], scale: float = 1.0, digits: int = 0) -> str:
    low, high = min(values) / scale, max(values) / scale
    text = f"{low:.{digits}f}"
    return text if low == high else f"{text}-{high:.{digits}f}"


def table(records: list[Record]) -> str:
    groups: dict[tuple[str, str, str], list[Record]] = defaultdict(list)
    for record in records:
        if record.metric("registers") is None:
            continue  # a test of the module that compiles nothing
        key = (str(record.params.get("kernel")), arithmetic(record),
               str(record.params.get("target")))
        groups[key].append(record)
    lines = ["| kernel | arithmetic | target | rows | registers | spill bytes | "
             "shared memory [kB] | tensor-core instr. | FFMA instr. | compile [s] |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for (kernel, math, target), rows in sorted(groups.items()):
        compile_times = [value(r, "compile_time") for r in rows if r.metric("compile_time")]
        lines.append(" | ".join([
            f"| {kernel}", math, target, str(len(rows)),
            span([value(r, "registers") for r in rows]),
            span([value(r, "spill_bytes") for r in rows]),
            span([value(r, "shared_memory") for r in rows], 1e3, 1),
            span([value(r, "tensor_core_instructions") for r in rows]),
            span([value(r, "ffma_instructions") for r in rows]),
            f"{sum(compile_times):.0f} |" if compile_times else "cached |"]))
    total = sum(len(rows) for rows in groups.values())
    spilling = sum(value(r, "spill_bytes") > 0 for rows in groups.values() for r in rows)
    lines += ["", f"{total} rows (a launch in a configuration; launches that Triton binds alike "
              f"share one compiled variant) in {len(groups)} kernel x arithmetic x target "
              f"combinations; {spilling} spill."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("quick", "full"), default="full")
    parser.add_argument("-n", dest="workers", default="2", help="xdist workers (default 2)")
    parser.add_argument("--report", type=Path, help="keep the run's JSON report here")
    parser.add_argument("--from-report", type=Path, help="only tabulate this JSON report")
    parser.add_argument("--warm", action="store_true", help="keep Triton's own cache")
    args = parser.parse_args(argv)
    if args.from_report:
        print(table(read_results(args.from_report)))
        return 0
    with tempfile.TemporaryDirectory(prefix="hpml-compile-") as scratch:
        report = args.report or Path(scratch) / "report.json"
        env = dict(os.environ)
        if not args.warm:
            env["TRITON_CACHE_DIR"] = str(Path(scratch) / "triton-cache")
        command = [sys.executable, "-m", "pytest", *TESTS, f"--hpml-profile={args.profile}",
                   "-n", args.workers, "-p", "no:cacheprovider", "-q", f"--hpml-report={report}"]
        started = time.monotonic()
        run = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
        seconds = time.monotonic() - started
        last = (run.stdout.strip().splitlines() or [""])[-1]
        print(f"$ {' '.join(command[1:])}\n{last}\nwall time {seconds:.0f} s "
              f"({'warm' if args.warm else 'empty'} Triton cache)\n")
        if run.returncode != 0:
            print(run.stdout[-5000:], run.stderr[-2000:], sep="\n")
        if report.exists():
            print(table(read_results(report)))
        return run.returncode


if __name__ == "__main__":
    sys.exit(main())
