"""How much does this machine's noise move the harness's own figures?

Runs suites/harness N times (each a fresh pytest process, JSON report with samples), then
  * the coefficient of variation of the reported median per metric across the runs,
  * the false-regression count: every run compared with every other run by the same
    verdict logic as --hpml-compare (nothing changed between runs, so each 'regressed' is
    a false alarm),
  * the wall time of 500 trivial tests with and without the plugin.

    python tools/harness_spread.py --runs 10 --out hpml-out/spread
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from pytest_hpml import Record, compare_results

ROOT = Path(__file__).resolve().parents[1]


def run_harness(out: Path, runs: int, reuse: bool = False) -> list[dict]:
    reports = []
    for i in range(runs):
        path = out / f"run-{i}.json"
        if reuse and path.exists():
            reports.append(json.loads(path.read_text()))
            continue
        subprocess.run([sys.executable, "-m", "pytest", "suites/harness", "-q",
                        "-p", "no:cacheprovider", f"--hpml-report={path}"],
                       cwd=ROOT, check=True, capture_output=True)
        reports.append(json.loads(path.read_text()))
    return reports


def _records(report: dict) -> list[Record]:
    return [Record.from_dict(r) for r in report["records"]]


def spread(reports: list[dict]) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for report in reports:
        for record in _records(report):
            for m in record.metrics:
                if m.better and m.compared:
                    values.setdefault(f"{record.id} {m.name}", []).append(m.value)
    return {k: statistics.stdev(v) / statistics.fmean(v) for k, v in values.items()
            if len(v) > 1}


def false_regressions(reports: list[dict]) -> tuple[int, int, dict[str, int]]:
    verdicts: dict[str, int] = {}
    regressed = comparisons = 0
    for old, new in itertools.permutations(reports, 2):
        # The same verdicts as --hpml-compare, through the plugin's stable entry point.
        for record in compare_results(_records(old), _records(new)):
            for m in record.metrics:
                verdict = record.verdict(m.name)
                if not m.better or not m.compared or verdict is None:
                    continue
                outcome = verdict.outcome
                verdicts[outcome] = verdicts.get(outcome, 0) + 1
                comparisons += 1
                regressed += outcome == "regressed"
    return regressed, comparisons, verdicts


def trivial_tests_wall_time(out: Path, count: int = 500) -> dict[str, float]:
    folder = out / "trivial"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "test_trivial.py").write_text(
        f"import pytest\n\n\n@pytest.mark.parametrize('i', range({count}))\n"
        "def test_trivial(i):\n    assert i >= 0\n")
    times = {}
    for label, extra in (("without plugin", ["-p", "no:hpml"]), ("with plugin", [])):
        samples = []
        for _ in range(3):
            start = time.perf_counter()
            subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "--rootdir", str(folder), str(folder), *extra],
                           check=True, capture_output=True)
            samples.append(time.perf_counter() - start)
        times[label] = statistics.median(samples)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "hpml-out" / "spread")
    parser.add_argument("--reuse", action="store_true",
                        help="analyse the run-N.json files already in --out instead of rerunning")
    parser.add_argument("--skip-trivial", action="store_true",
                        help="do not time the 500 trivial tests")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    reports = run_harness(args.out, args.runs, args.reuse)
    for name, cv in spread(reports).items():
        print(f"CV of the median over {args.runs} runs: {cv:.2%}  {name}")
    regressed, comparisons, verdicts = false_regressions(reports)
    print(f"false regressions: {regressed} of {comparisons} pairwise metric comparisons "
          f"({verdicts})")
    if args.skip_trivial:
        return
    for label, seconds in trivial_tests_wall_time(args.out).items():
        print(f"500 trivial tests, {label}: {seconds:.2f} s (median of 3)")


if __name__ == "__main__":
    main()
