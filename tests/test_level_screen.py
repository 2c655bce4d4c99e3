"""A save's level screen (compare/level_screen.py) answers "could this be a new level?" without
weighing the noise in full, and only where the full judgement would answer the same: on
thousands of random rows (histories of several saves, processes now, a machine of two speeds,
preempted calls, yardsticks, sweeps judged as families) every screened verdict has the full
judgement's outcome, and a save of a sweep still starts a new level for the row that moved."""

from __future__ import annotations

import json
import random

import pytest
from hpml_testing import (
    FAST,
    arrays_from,
    baseline_file,
    random_sweep_row,
    save_in_processes,
)

from pytest_hpml.compare import engine, level_screen
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules, judge_metric
from pytest_hpml.results import Metric, Record, Replicates


def _row(rng: random.Random, i: int) -> tuple[Record, dict[str, Stored]]:
    """A sweep's row: a history of 1-6 saves of 1-3 processes each, this run's 1-3
    processes, each value at one of two speeds 50 % apart now and then, a preempted call now
    and then, a slowdown of the row now and then; with a yardstick now and then."""
    saves, history, values, _, _ = random_sweep_row(rng)
    now = tuple(values)
    yardstick = rng.random() < 0.3
    relative = tuple(v / rng.uniform(0.9, 1.1) for v in now) if yardstick else None
    base = Stored("time", history[-1], "s", "lower", history=history, history_saves=saves,
                  relative_history=[v / rng.uniform(0.9, 1.1) for v in history]
                  if yardstick else None)
    record = Record(f"t[size={i}]", "sweep", test="t",
                    metrics=[Metric("time", now[0], "s", "lower")])
    record.replicates["time"] = Replicates(now, relative)
    return record, {"time": base}


@pytest.mark.parametrize("seed", range(4))
def test_a_screened_verdict_is_the_full_judgements_outcome(seed: int) -> None:
    rng = random.Random(seed)
    rules = Rules(drift=rng.choice([0.0, 0.05]))
    rows = [_row(rng, i) for i in range(400)]
    records = [r for r, _ in rows]
    bases = {r.id: b for r, b in rows}
    found = engine.families(records, bases)  # 400 rows of one test: judged as a family
    screened = 0
    for record, base in rows:
        now = record.values_of("time")
        quick = level_screen.screened(record.metrics[0], now, base["time"], rules)
        if quick is None:
            continue
        screened += 1
        for family in (None, found.get(("t", "time"))):
            full = judge_metric(record.metrics[0], now, base["time"], rules, 0, None, family)
            assert full is not None and full.outcome == quick.outcome, (record.id, quick, full)
        assert quick.outcome in ("unchanged", "ambiguous")
        assert level_screen.SCREENED in (quick.basis or "")
    # Not a vacuous check: many rows are screened, and some are left to the full judgement.
    assert 0.2 * len(rows) < screened < len(rows)


@pytest.mark.parametrize("as_arrays", [False, True], ids=["row by row", "as arrays"])
def test_a_save_of_a_sweep_screens_its_rows_and_starts_a_level_for_the_one_that_moved(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, as_arrays: bool) -> None:
    # Judged as arrays (numpy imported, compare/arrays.py), the rows skip the screen.
    if as_arrays:
        pytest.importorskip("numpy")
    arrays_from(monkeypatch, 100 if as_arrays else 10**9)
    sweep = """
import os

def test_sweep(hpml):
    for i in range(200):
        slower = 3.0 if i == 7 and os.environ.get("SLOWER") else 1.0
        with hpml.row(size=i) as row:
            row.record("time", 1e-3 * (1 + i / 1000) * slower, unit="s", better="lower")
"""
    pytester.makepyfile(test_sweep=sweep)
    for _ in range(3):
        pytester.runpytest(*save_in_processes(1)).assert_outcomes(passed=1)
    monkeypatch.setenv("SLOWER", "1")
    asked: list[str] = []
    screen = level_screen.screened

    def counted(*args: object) -> object:
        verdict = screen(*args)  # type: ignore[arg-type]
        asked.append(verdict.outcome if verdict is not None else "judged in full")
        return verdict

    monkeypatch.setattr(level_screen, "screened", counted)
    result = pytester.runpytest(*save_in_processes(1))
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*1 metric(s) changed beyond what this machine can detect*"
                                 "size=7*"])
    if as_arrays:
        assert asked == []
    else:
        assert asked.count("unchanged") == 199 and asked.count("judged in full") == 1
    rows = {r["id"]: r["metrics"][0] for r in json.loads(
        baseline_file(pytester.path / "baselines").read_text(encoding="utf-8"))["records"]}
    moved = rows.pop("test_sweep.py::test_sweep[size=7]")
    assert moved["accepted"] and moved["history"] == [pytest.approx(3.021e-3)]
    assert all(len(m["history"]) == 4 and not m.get("accepted") for m in rows.values())


def test_a_compare_weighs_every_row_in_full(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_one="""
def test_one(hpml):
    hpml.record("time", 1e-3, unit="s", better="lower")
""")
    pytester.runpytest(*save_in_processes(1)).assert_outcomes(passed=1)
    out = pytester.path / "compare.json"
    pytester.runpytest(*FAST, "--hpml-compare", f"--hpml-report={out}").assert_outcomes(
        passed=1)
    (row,) = json.loads(out.read_text(encoding="utf-8"))["records"]
    verdict = row["verdicts"]["time"]
    assert verdict["outcome"] == "unchanged" and level_screen.SCREENED not in verdict["basis"]
    assert verdict["mdc"] > 0
