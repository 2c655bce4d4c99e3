"""Saves made within the hour are one occasion of a metric's history (issue 28: five saves made
minutes apart "learned" a drift of 0-2 %, and the compare after them read the same code 10-20 %
slower in every process). The drift between occasions is learned only from saves of three
occasions; until then it is assumed (--hpml-drift), or is what the saves of one hour showed
where that is more."""

from __future__ import annotations

import datetime
from pathlib import Path

from hpml_testing import HERE, Measured

from pytest_hpml.compare import baselines, provenance
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules, judge_metric
from pytest_hpml.results import Record, Verdict

DAY = datetime.datetime(2026, 12, 6, tzinfo=datetime.timezone.utc)


def _at(minutes: float) -> str:
    return (DAY + datetime.timedelta(minutes=minutes)).isoformat()


def _save(path: Path, minutes: float, runs: list[float]) -> Stored:
    """A save made `minutes` into the day, of the processes `runs` (the run's own first)."""
    metric = Measured("time", runs[0], "s", "lower", runs=runs)
    record = Record("a", "e", metrics=[metric.metric()],
                    replicates={"time": metric.replicates()})
    baselines.save(path, HERE, "quick", [record], baselines.MergePolicy(when=_at(minutes)))
    return baselines.load(path).metrics_for("a")["time"]


def _judged(base: Stored, runs: list[float]) -> Verdict:
    now = Measured("time", runs[0], "s", "lower", runs=runs)
    verdict = judge_metric(now.metric(), now.replicates(), base, Rules())
    assert verdict is not None
    return verdict


def test_saves_within_an_hour_of_an_occasions_first_are_that_occasion() -> None:
    ids = [provenance.new_save_id(_at(m), []) for m in (0, 10, 50, 65, 110, 24 * 60)]
    # 01:05 is within the hour of 00:50, not of its occasion's first save at 00:00; 01:50 is
    # within the hour of 01:05.
    assert provenance.occasions_in_time(ids) == [3, 2, 1]
    # A save of unknown time (before saves had ids) is an occasion of its own.
    assert provenance.occasions_in_time([None, ids[0], None, ids[1]]) is None
    assert provenance.occasions_in_time([None, ids[0], ids[1]]) == [1, 2]
    # Each save its own occasion: nothing to join.
    assert provenance.occasions_in_time([ids[0], ids[3], ids[5]]) is None
    assert provenance.occasions_in_time(None) is None


def test_saves_made_minutes_apart_teach_no_drift(tmp_path: Path) -> None:
    # Three saves within ten minutes, every process within 1 % of the others: the machine's
    # speed of ten minutes, not of the day.
    path = tmp_path / "minutes.json"
    for minutes, runs in ((0, [1.0, 1.01, 0.99]), (5, [1.0, 0.99, 1.01]),
                          (10, [1.01, 1.0, 0.99])):
        minutes_apart = _save(path, minutes, runs)
    assert minutes_apart.saves_together == [3]
    later = [1.12, 1.13, 1.11]  # unchanged code an hour later, every process 12 % slower
    verdict = _judged(minutes_apart, later)
    assert verdict.outcome == "ambiguous", verdict.basis
    assert "drift between occasions 4.9 % assumed" in verdict.basis
    assert "it has 3 saves of one occasion" in verdict.basis
    # A 25 % slowdown is still caught through the assumed drift.
    assert _judged(minutes_apart, [1.25, 1.26, 1.24]).outcome == "regressed"
    # The same saves made hours apart: three occasions that agree teach that the machine
    # does not drift, and the 12 % is the code's.
    path = tmp_path / "hours.json"
    for minutes, runs in ((0, [1.0, 1.01, 0.99]), (180, [1.0, 0.99, 1.01]),
                          (360, [1.01, 1.0, 0.99])):
        hours_apart = _save(path, minutes, runs)
    assert hours_apart.saves_together is None
    verdict = _judged(hours_apart, later)
    assert verdict.outcome == "regressed", verdict.basis
    assert "learned from 3 saves" in verdict.basis


def test_saves_of_one_hour_that_moved_apart_show_at_least_that_drift(tmp_path: Path) -> None:
    path = tmp_path / "moved.json"
    for minutes, runs in ((0, [1.0, 1.01, 0.99]), (5, [1.15, 1.16, 1.14]),
                          (10, [0.9, 0.91, 0.89])):
        moved = _save(path, minutes, runs)
    verdict = _judged(moved, [1.12, 1.13, 1.11])
    assert verdict.outcome == "ambiguous", verdict.basis
    assert "as far as its 3 saves of one occasion moved apart" in verdict.basis
    assert verdict.mdc is not None and verdict.mdc > 0.25  # more than the assumed 5 % allows


def test_occasions_an_hour_apart_teach_the_drift_with_the_saves_between_them(
        tmp_path: Path) -> None:
    # Two saves in the morning, one at noon, two in the evening: three occasions, whose
    # means moved by about 10 %.
    path = tmp_path / "day.json"
    for minutes, level in ((0, 1.0), (20, 1.02), (360, 1.1), (720, 0.95), (730, 0.96)):
        day = _save(path, minutes, [level, level * 1.01, level * 0.99])
    assert day.saves_together == [2, 1, 2]
    verdict = _judged(day, [1.12, 1.13, 1.11])
    assert "learned from 3 occasions (5 saves, those of one hour counted once)" in \
        verdict.basis, verdict.basis
    assert verdict.outcome == "ambiguous", verdict.basis
