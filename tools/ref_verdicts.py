"""Does --hpml-compare-ref fail on a real slowdown and never on noise, on the team's suite of
tools/cost_ratios.py? Unchanged code (--hpml-compare-ref=HEAD: every failure is a false alarm)
and code whose test_add works on 25 % more elements (a commit on top, --hpml-compare-ref=HEAD~1:
a failure of test_add is a catch, of any other test a false alarm), each a fresh `python -m
pytest` process, the conditions taking turns in each trial (the order rotating between trials).

Here torch.add's processes land in one of two modes, one in four about 23 % slower than the
others: three processes a side could all land in opposite modes, a false alarm about once in
150 per test and run. -k narrows the suite (by default to test_add, the bimodal one: a run is
seconds).

    python tools/ref_verdicts.py --trials 20
    python tools/ref_verdicts.py --trials 20 --before 56678f3   # + the plugin at a commit
    python tools/ref_verdicts.py --trials 5 -k "" --processes 5  # the whole suite, 5 a side
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import time
from collections import Counter
from pathlib import Path

from checkouts import worktree  # tools/ is on sys.path when this file runs
from cost_ratios import HPML, SUITE, _pytest, project

ROOT = Path(__file__).resolve().parents[1]
SLOWED = "torch.rand(n), torch.rand(n)"  # test_add's operands, and only its
FAILED = re.compile(r"^FAILED (\S+)", re.MULTILINE)


def _slowed_clone(folder: Path) -> Path:
    """A clone of the suite's repository with a commit on top in which test_add works on 25 %
    more elements."""
    clone = folder.parent / "slowed"
    subprocess.run(["git", "clone", "-q", str(folder), str(clone)], check=True,
                   capture_output=True)
    test = clone / "test_team.py"
    assert SUITE.count(SLOWED) == 1
    test.write_text(SUITE.replace(SLOWED, "torch.rand(n * 5 // 4), torch.rand(n * 5 // 4)"))
    git = ["git", "-c", "user.name=cost", "-c", "user.email=cost@localhost"]
    subprocess.run([*git, "commit", "-qam", "25 % more elements in test_add"], cwd=clone,
                   check=True, capture_output=True)
    return clone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--out", type=Path, default=ROOT / "hpml-out" / "ref-verdicts")
    parser.add_argument("-k", dest="keyword", default="test_add",
                        help="pytest's -k of the runs ('' for the whole suite)")
    parser.add_argument("--processes", type=int, default=0,
                        help="--hpml-compare-ref-processes (0: the plugin's default)")
    parser.add_argument("--before", metavar="REV", default=None,
                        help="also with the plugin at git revision REV, in the same trials")
    parser.add_argument("--alarms", type=Path,
                        default=ROOT / "hpml-out" / "ref-verdicts-alarms",
                        help="where the output of a run with a false alarm is kept")
    parser.add_argument("--misses", action="store_true",
                        help="print the verdict of each slowed test_add row that passed")
    args = parser.parse_args()
    unchanged = project(args.out)
    slowed = _slowed_clone(unchanged)
    common = [*HPML, *(["-k", args.keyword] if args.keyword else []),
              *([f"--hpml-compare-ref-processes={args.processes}"] if args.processes else [])]
    plugins: dict[str, Path] = {"this checkout": ROOT}
    if args.before:
        plugins[args.before] = worktree(args.out.parent / "ref-verdicts-before", args.before)
    arms = [(version, condition) for version in plugins for condition in ("unchanged", "slowed")]
    failures: dict[tuple[str, str], Counter[str]] = {arm: Counter() for arm in arms}
    runs_failed: Counter[tuple[str, str]] = Counter()
    seconds: dict[tuple[str, str], list[float]] = {arm: [] for arm in arms}
    started = time.monotonic()
    for trial in range(args.trials):
        shift = trial % len(arms)
        for version, condition in arms[shift:] + arms[:shift]:
            folder, ref = (unchanged, "HEAD") if condition == "unchanged" else (slowed, "HEAD~1")
            report = args.out / "report.json"
            code, took, text = _pytest(folder, [*common, f"--hpml-compare-ref={ref}",
                                                f"--hpml-report={report}"], plugins[version])
            failed = FAILED.findall(text)
            if code not in (0, 1) or (code == 1) != bool(failed):
                raise SystemExit(f"{version}, {condition}: exit {code}\n{text[-3000:]}")
            failures[version, condition].update(failed)
            runs_failed[version, condition] += bool(failed)
            seconds[version, condition].append(took)
            kept = ""
            alarms = [t for t in failed if condition == "unchanged" or "::test_add[" not in t]
            if alarms:  # a false alarm's verdicts are read afterwards, not lost with the run
                args.alarms.mkdir(parents=True, exist_ok=True)
                path = args.alarms / f"{trial + 1:02d}-{version.replace(' ', '_')}-{condition}.txt"
                path.write_text(text, encoding="utf-8")
                kept = f" (a false alarm: output kept in {path})"
            print(f"trial {trial + 1}/{args.trials} {version:14s} {condition:9s} exit {code} in "
                  f"{took:.1f} s {' '.join(failed)}{kept}", flush=True)
            if args.misses and condition == "slowed":
                for record in json.loads(report.read_text())["records"]:
                    verdict = (record.get("verdicts") or {}).get("time")
                    if record["id"].startswith("test_team.py::test_add") and verdict and \
                            verdict["outcome"] != "regressed":
                        print(f"    missed {record['id']}: {verdict['outcome']}: "
                              f"{verdict.get('basis')}", flush=True)
    print(f"\n{args.trials} trials in {(time.monotonic() - started) / 60:.1f} min\n")
    print("| plugin | condition | runs with a failure | failures by test | median s |")
    print("|---|---|---|---|---|")
    for arm in arms:
        by_test = ", ".join(f"{test.split('::')[-1]} {n}" for test, n in
                            sorted(failures[arm].items())) or "none"
        print(f"| {arm[0]} | {arm[1]} | {runs_failed[arm]} of {args.trials} | {by_test} | "
              f"{statistics.median(seconds[arm]):.1f} |")
    shutil.rmtree(args.out, ignore_errors=True)


if __name__ == "__main__":
    main()
