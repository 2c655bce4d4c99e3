"""What a suite run as N shards and a merge costs against the same suite run whole (issue 28):
main's job of a team (`--hpml-compare --hpml-save-baseline`, compare with the baseline branch
and save onto it) on the team's suite of tools/cost_ratios.py (23 benchmarks, a git repository
of its own, a history of saves), timed as whole `python -m pytest` processes:

- whole: one run of the suite, saving into a copy of the history;
- shard I of N: `--hpml-shard=I/N` into a folder of its own (its report.json and its copy of
  the history), a fresh process each, as a runner of a fleet runs it;
- merge: `python -m pytest_hpml merge` of the N folders into another copy of the history, with
  a Markdown and a JSON report, as the fleet's final job.

On this 2-core machine the shards run one after another (at once they would load each other's
timings); on a fleet they run at once, so the sharded job takes its longest shard plus the
merge. Each trial runs the whole suite and the shards in turns (which goes first alternates)
and checks that the merged baseline holds the rows the whole run saved. Medians over trials.

    python tools/shard_cost.py --trials 5 --shards 3 --history 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import time
from pathlib import Path
from typing import Any

# tools/ is on sys.path when this file runs
from cost_ratios import HPML, ROOT, SUITE, _pytest, keep_output, project, timed

MAIN_JOB = [*HPML, "--hpml-compare", "--hpml-save-baseline"]


def _rows(folder: Path) -> dict[str, list[tuple[str, int]]]:
    """Each row a baselines folder holds, with the saves each metric's history holds: what
    tells which rows this trial's save added to (a failed test's row is not saved). Not the
    values: how many processes a save measured is the noise's (a compare's confirmations, the
    save's budget), in one run as in a shard."""
    rows = {}
    for file in sorted(folder.glob("*.json")):
        for r in json.loads(file.read_text())["records"]:
            rows[r["id"]] = sorted((m["name"], len(m.get("history_saves") or []))
                                   for m in r["metrics"])
    return rows


def _keep(suite: Path, name: str, code: int, text: str) -> None:
    """A failing step's output, kept in <out>/runs/ to be read afterwards."""
    if code:
        keep_output(suite.parent, f"{time.strftime('%H%M%S')}-{name}", text)


def _merge(suite: Path, shards: list[Path], into: Path) -> tuple[int, float, str]:
    """The merge job, timed as the pytest runs are (a user's process, its bytecode cached)."""
    return timed(suite, ["-m", "pytest_hpml", "merge", *map(str, shards), "--baselines",
                         str(into), "--report", str(suite / "merged.md"),
                         "--report", str(suite / "merged.json")])


def trial(suite: Path, shards: int, whole_first: bool) -> dict[str, Any]:
    """One trial: the whole suite and its shards (in the order given), then the merge."""
    took: dict[str, Any] = {}
    history = suite / "history"

    def whole() -> None:
        into = suite / "whole"
        shutil.rmtree(into, ignore_errors=True)
        shutil.copytree(history, into)
        code, took["whole"], text = _pytest(suite, [*MAIN_JOB, f"--hpml-baselines={into}"])
        took["whole failed"] = code != 0
        _keep(suite, "whole", code, text)

    def sharded() -> None:
        failed = 0
        for i in range(1, shards + 1):
            folder = suite / f"shard-{i}"
            shutil.rmtree(folder, ignore_errors=True)
            shutil.copytree(history, folder / "baselines")  # the runner's copy of the branch
            code, took[f"shard {i}"], text = _pytest(suite, [
                *MAIN_JOB, f"--hpml-shard={i}/{shards}", f"--hpml-baselines={folder}/baselines",
                f"--hpml-report={folder}/report.json"])
            failed += code != 0
            _keep(suite, f"shard-{i}", code, text)
        into = suite / "merged"
        shutil.rmtree(into, ignore_errors=True)
        shutil.copytree(history, into)
        code, took["merge"], text = _merge(suite, [suite / f"shard-{i}"
                                                   for i in range(1, shards + 1)], into)
        _keep(suite, "merge", code, text)
        if code not in (0, 1):  # 1: a merged verdict failed, as the run would have
            raise SystemExit(f"the merge could not run:\n{text[-3000:]}")
        took["shards failed"] = failed
        took["merge failed"] = code == 1

    for step in ((whole, sharded) if whole_first else (sharded, whole)):
        step()
    merged, whole_rows = _rows(suite / "merged"), _rows(suite / "whole")
    took["same rows"] = merged == whole_rows
    took["rows differing"] = sorted(k for k in merged.keys() | whole_rows.keys()
                                    if merged.get(k) != whole_rows.get(k))
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--shards", type=int, default=3)
    parser.add_argument("--history", type=int, default=3, metavar="SAVES",
                        help="saves made before the trials, which every run compares with "
                             "and saves onto (the baseline branch)")
    parser.add_argument("--out", type=Path, default=ROOT / "hpml-out" / "shard-cost")
    args = parser.parse_args()
    suite = project(args.out, SUITE)
    for _ in range(max(1, args.history)):
        code, _, text = _pytest(suite, [*HPML, "--hpml-save-baseline",
                                        "--hpml-baselines=history"])
        if code:
            raise SystemExit(f"saving the history failed:\n{text[-3000:]}")
    trials = []
    for t in range(args.trials):
        got = trial(suite, args.shards, whole_first=t % 2 == 0)
        trials.append(got)
        shard_times = [float(got[f"shard {i}"]) for i in range(1, args.shards + 1)]
        print(f"trial {t + 1}/{args.trials}: whole {got['whole']:.1f} s"
              f"{' (failed)' if got['whole failed'] else ''}; shards "
              + ", ".join(f"{s:.1f}" for s in shard_times)
              + f" s ({got['shards failed']} failed); merge {got['merge']:.1f} s"
              + f"{' (a verdict failed)' if got['merge failed'] else ''}; "
              + ("the same rows saved" if got["same rows"] else
                 f"rows saved differently: {', '.join(got['rows differing'])} (a test failed "
                 "in one of the two runs, and its row was not saved there)"),
              flush=True)
    names = ["whole", *(f"shard {i}" for i in range(1, args.shards + 1)), "merge"]
    print("\n| step | median s | min s | max s |\n|---|---|---|---|")
    for name in names:
        values = [float(t[name]) for t in trials]
        print(f"| {name} | {statistics.median(values):.2f} | {min(values):.2f} | "
              f"{max(values):.2f} |")
    shard_names = names[1:-1]
    fleet = [max(float(t[n]) for n in shard_names) + float(t["merge"]) for t in trials]
    serial = [sum(float(t[n]) for n in shard_names) for t in trials]
    whole_median = statistics.median(float(t["whole"]) for t in trials)
    print(f"\n| derived, per trial | median s | / whole |\n|---|---|---|\n"
          f"| longest shard + merge (N runners at once) | {statistics.median(fleet):.2f} | "
          f"{statistics.median(fleet) / whole_median:.2f} |\n"
          f"| every shard, one after another (runner time) | {statistics.median(serial):.2f} | "
          f"{statistics.median(serial) / whole_median:.2f} |")
    print(f"\nunchanged runs that failed: whole {sum(bool(t['whole failed']) for t in trials)}"
          f" of {len(trials)}, merged {sum(bool(t['merge failed']) for t in trials)} of "
          f"{len(trials)}; the merged baseline held the whole run's rows in "
          f"{sum(bool(t['same rows']) for t in trials)} of {len(trials)} trials")


if __name__ == "__main__":
    main()
