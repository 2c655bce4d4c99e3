"""A large family's ordinary rows are judged as arrays (compare/arrays.py), and every verdict is
the one the row-by-row judgement gives, at either least gap between modes: on random sweeps
(histories of 1-6 saves made hours or minutes apart, 1-3 processes now, two speeds of the
machine, preempted calls, slowdowns and speed-ups, both directions and none, units that drift
and units that do not, a row's own tolerance, samples, accepted levels, and rows of other kinds
that the arrays leave out: a yardstick, a value that is no number, a unit saved in ms) the
outcome, the basis, the blind spot and the figures agree, with and without fresh processes to
confirm."""

from __future__ import annotations

import datetime
import math
import random
import statistics
import sys

import pytest
from hpml_testing import arrays_from, random_sweep_row

from pytest_hpml.compare import array_verdicts, arrays, engine, level_screen, provenance
from pytest_hpml.compare.families import Family
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.report.lines import LINES_PER_METRIC
from pytest_hpml.report.verdict_lines import blind_spot_lines, verdict_lines
from pytest_hpml.results import Metric, Record, Replicates, Verdict
from pytest_hpml.verdict import Worded


def _row(rng: random.Random, i: int, better: str | None, unit: str
         ) -> tuple[Record, dict[str, Stored]]:
    saves, history, now, level, spread = random_sweep_row(
        rng, (1.0, 1.0, 1.0, 1.05, 1.12, 1.3, 0.7, 2.0, 0.3))
    kind = rng.random()
    relative = None
    stored_unit, factor = unit, 1.0
    if kind < 0.05:  # a yardstick: judged row by row
        relative = tuple(v / rng.uniform(0.9, 1.1) for v in now)
    elif kind < 0.08:
        now[0] = math.nan  # a process that measured no number
    elif kind < 0.1 and unit == "s":
        stored_unit, factor = "ms", 1e3  # saved in ms, converted by the engine
    samples = [now[0] * math.exp(rng.gauss(0, spread)) for _ in range(9)] \
        if rng.random() < 0.3 and math.isfinite(now[0]) else None
    accepted = [{"on": "2026-11-01", "before": level / 2, "after": level}] \
        if rng.random() < 0.1 else None
    base = Stored("time", history[-1] * factor, stored_unit, better,
                  history=[v * factor for v in history], history_saves=saves,
                  history_save_ids=_save_ids(len(saves), rng.choice(list(SAVED_EVERY))),
                  notch=rng.choice([None, 0.01, 0.05]), accepted=accepted,
                  relative_history=[v / rng.uniform(0.9, 1.1) for v in history]
                  if relative else None)
    tolerance = rng.choice([None, None, None, 0.05, 0.3])
    metric = Metric("time", now[0] if math.isfinite(now[0]) else 1.0, unit, better,
                    samples=samples, tolerance=tolerance)
    record = Record(f"t[size={i}]", "sweep", test="t", metrics=[metric])
    record.replicates["time"] = Replicates(tuple(now), relative)
    return record, {"time": base}


#: Seconds between a row's saves: hours apart (each its own occasion), minutes apart (one
#: occasion), both in turns, or unknown (saves before ids).
SAVED_EVERY = {"hours": (7200,), "minutes": (300,), "turns": (300, 7200), "unknown": ()}


def _save_ids(saves: int, every: str) -> list[str | None] | None:
    gaps = SAVED_EVERY[every]
    if not gaps:
        return None
    at = datetime.datetime(2026, 11, 1, tzinfo=datetime.timezone.utc)
    ids: list[str | None] = []
    for i in range(saves):
        ids.append(provenance.new_save_id(at.isoformat(), ids))
        at += datetime.timedelta(seconds=gaps[i % len(gaps)])
    return ids


def _copies(rows: list[tuple[Record, dict[str, Stored]]]) -> list[Record]:
    """The rows' records as a run makes them, unjudged."""
    records = [Record.from_dict(r.to_dict()) for r, _ in rows]
    for copy, (record, _) in zip(records, rows, strict=True):
        copy.replicates = dict(record.replicates)
    return records


def _judged(rows: list[tuple[Record, dict[str, Stored]]], rules: Rules, can_confirm: int
            ) -> list[Verdict]:
    records = _copies(rows)
    bases = {r.id: b for r, b in rows}
    engine.judge_rows(records, lambda rid: bases[rid], rules, can_confirm)
    return [r.verdicts["time"] for r in records]


def _agree(a: Verdict, b: Verdict) -> bool:
    """The same verdict, its figures to the last digits (numpy sums pairwise, the rows' code
    exactly rounded)."""
    def close(x: object, y: object) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9) or (math.isnan(x) and math.isnan(y))
        return x == y

    return all(close(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)


@pytest.mark.parametrize("seed", range(6))
def test_a_large_familys_verdicts_as_arrays_are_the_row_by_row_ones(
        seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(seed)
    better = rng.choice(["lower", "lower", "higher", None])
    unit = {"lower": rng.choice(["s", ""]), "higher": "B/s", None: ""}[better]
    rows = [_row(rng, i, better, unit) for i in range(300)]
    # Every other seed with the narrower gap between modes of --hpml-compare-ref's processes.
    rules = Rules(drift=rng.choice([0.0, 0.05]), tolerance=rng.choice([0.1, 0.03]),
                  max_detectable=rng.choice([0.5, None]),
                  one_occasion=bool(seed % 2),
                  # Every other seed assumes the drift the baseline's metrics learned.
                  drift_learned_by=7 * (seed // 2 % 2))
    can_confirm = seed % 3
    arrays_from(monkeypatch, 10**9)
    by_row = _judged(rows, rules, can_confirm)
    given: list[int] = []
    judged = arrays.judged

    def counted(*args: object, **kwargs: object) -> dict:
        found = judged(*args, **kwargs)  # type: ignore[arg-type]
        given.append(len(found))
        return found

    arrays_from(monkeypatch, 100)
    monkeypatch.setattr(arrays, "judged", counted)
    as_arrays = _judged(rows, rules, can_confirm)
    differ = [(a, b) for a, b in zip(by_row, as_arrays, strict=True) if not _agree(a, b)]
    assert not differ, differ[:2]
    # Most rows were judged as arrays; the rest (other kinds, caught changes) row by row.
    assert 150 <= sum(given) < 300, given
    assert {v.outcome for v in as_arrays} >= {"unchanged", "ambiguous"}


def test_without_numpy_every_row_is_judged_row_by_row(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(7)
    rows = [_row(rng, i, "lower", "s") for i in range(200)]
    by_row = _judged(rows, Rules(), 2)
    arrays_from(monkeypatch, 100)
    monkeypatch.setitem(sys.modules, "numpy", None)  # `import numpy` fails, as uninstalled
    assert arrays.judged([((r, r.metrics[0], b["time"]), None) for r, b in rows], _family(rows),
                         Rules(), 0) == {}
    assert all(_agree(a, b) for a, b in zip(by_row, _judged(rows, Rules(), 2), strict=True))


def _family(rows: list[tuple[Record, dict[str, Stored]]]) -> Family:
    return engine.families([r for r, _ in rows], {r.id: b for r, b in rows})[("t", "time")]


def test_a_saves_large_family_is_judged_as_arrays_not_screened(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(11)
    rows = [_row(rng, i, "lower", "s") for i in range(200)]
    arrays_from(monkeypatch, 100)
    screened: list[object] = []
    screen = level_screen.screened
    monkeypatch.setattr(level_screen, "screened",
                        lambda *a: screened.append(a) or screen(*a))  # type: ignore[func-returns-value]
    records = _copies(rows)
    bases = {r.id: b for r, b in rows}
    engine.judge_rows(records, lambda rid: bases[rid], Rules(), levels_only=True)
    assert not screened  # the arrays answered, for less
    # A save's question has the full judgement's answer for every row; a new level's verdict
    # is the full one, and a change the noise hides is said as the screen says it.
    full = _judged(rows, Rules(), 0)
    assert [r.verdicts["time"].outcome for r in records] == [v.outcome for v in full]
    for record, verdict in zip(records, full, strict=True):
        mine = record.verdicts["time"]
        if verdict.outcome in ("regressed", "improved"):
            assert _agree(mine, verdict)
        elif mine.basis != verdict.basis:
            assert level_screen.SCREENED in mine.basis and mine.blind is None
    assert {v.outcome for v in full} >= {"unchanged", "ambiguous", "regressed"}
    arrays_from(monkeypatch, 10**9)
    engine.judge_rows(records, lambda rid: bases[rid], Rules(), levels_only=True)
    assert screened  # a family judged row by row is screened first


def test_a_family_is_judged_as_arrays_where_that_repays_numpys_import(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(arrays, "available", lambda: True)
    monkeypatch.setitem(sys.modules, "numpy", object())  # imported already (torch did)
    assert arrays.worth_it(arrays.ARRAY_ROWS) and not arrays.worth_it(arrays.ARRAY_ROWS - 1)
    monkeypatch.setitem(sys.modules, "numpy", None)  # not imported so far
    assert not arrays.worth_it(arrays.ARRAY_ROWS_TO_IMPORT - 1)
    assert arrays.worth_it(arrays.ARRAY_ROWS_TO_IMPORT)
    monkeypatch.setattr(arrays, "available", lambda: False)  # not installed
    assert not arrays.worth_it(10**6)


def test_a_sweeps_verdicts_are_put_in_words_only_where_they_are_read(
        monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(3)
    rows = [_row(rng, i, "lower", "s") for i in range(300)]
    rules = Rules(max_detectable=0.3)
    arrays_from(monkeypatch, 100)
    said: list[object] = []
    words = array_verdicts._words
    monkeypatch.setattr(array_verdicts, "_words", lambda *a: said.append(a) or words(*a))
    records = _copies(rows)
    engine.judge_rows(records, {r.id: b for r, b in rows}.__getitem__, rules, 0)
    worded = [v for r in records for v in r.verdicts.values() if isinstance(v, Worded)]
    blind = [v for v in worded if v.has_blind_spot]
    assert len(worded) >= 150 and len(blind) > LINES_PER_METRIC and not said
    spots = sum(v.has_blind_spot for r in records for v in r.verdicts.values())
    # The terminal's lines put in words only the blind spots they show ...
    lines = verdict_lines(records) + blind_spot_lines(records)
    assert 0 < len(said) < LINES_PER_METRIC
    # ... and are those of the verdicts made with their words.
    for record in records:
        record.verdicts = {k: Verdict.from_dict(v.to_dict()) for k, v in record.verdicts.items()}
    assert lines == verdict_lines(records) + blind_spot_lines(records)
    assert sum(v.has_blind_spot for r in records for v in r.verdicts.values()) == spots


@pytest.mark.parametrize("between_known", [True, False])
def test_whether_fresh_processes_could_catch_a_change_is_asked_of_all_rows_as_one_by_one(
        between_known: bool) -> None:
    """array_noise.Noises.could_catch, for every row, is detectable's question asked of the
    row's Noise: random spreads and drifts, a family's drift or not, one process now and one
    to six stored, changes near what more processes could bring in reach."""
    np = pytest.importorskip("numpy")
    from pytest_hpml.compare.array_noise import Noises
    from pytest_hpml.compare.detectable import _confirmation_could_catch
    from pytest_hpml.compare.noise import Noise

    rng = random.Random(5 if between_known else 6)
    n = 400
    moved = np.array([rng.random() < 0.5 for _ in range(n)])
    noises = Noises(
        np.array([rng.uniform(0.005, 0.3) for _ in range(n)]) if between_known else None,
        np.array([rng.randint(1, 12) for _ in range(n)]),
        np.array([rng.uniform(0.0, 0.05) for _ in range(n)]),
        np.array([rng.choice([0.0, rng.uniform(0.0, 0.2)]) for _ in range(n)]),
        # A drift learned over 2 degrees of freedom: one more process may catch what three
        # would not (noise.Noise.processes_for), so each count is asked.
        2, rng.randint(1, 4), 1, rng.randint(1, 6),
        np.where(moved, rng.randint(100, 500), 0), moved,
        # Some rows' drift is what their 5 saves of one occasion showed (over 4 degrees of
        # freedom, not the shape's 2).
        5, np.array([rng.random() < 0.3 for _ in range(n)]))
    change = np.array([rng.uniform(-0.5, 3.0) for _ in range(n)])
    tol = np.array([rng.choice([0.0, 0.05, 0.1]) for _ in range(n)])
    for extra in (1, 2, 3):
        for alpha in (0.01, 0.001):
            taken = noises.could_catch(np, change, tol, alpha, extra).tolist()
            one_by_one = [_confirmation_could_catch(
                Noise(*noises.parts(i)), float(change[i]), noises.runs_now, extra,
                float(tol[i]), alpha) for i in range(n)]
            assert taken == one_by_one
            assert 0 < sum(taken) < n  # both answers are asked
    rows = np.array([3, 1, 4])
    part = noises.taken(rows)
    assert [part.parts(j) for j in range(3)] == [noises.parts(int(i)) for i in rows]


def _tails_sweep(rng: random.Random, one_process: bool) -> list[tuple[Record, dict[str, Stored]]]:
    """200 rows whose median change is exactly none; one row moved down to half, so the
    family's farthest move down is ln 2; four moved up, two just within TAIL_MARGIN times it
    and two just beyond. one_process: one stored run and one process now (the spread between
    processes unknown), with samples on both sides; else one save of three processes."""
    farthest = math.log(2.0)
    moves = {0: 0.5, 1: math.exp(1.45 * farthest), 2: math.exp(1.55 * farthest),
             3: math.exp(1.4 * farthest), 4: math.exp(1.6 * farthest)}
    rows = []
    for i in range(200):
        level = rng.uniform(1e-6, 1e-3)
        history = [level] if one_process else [level * math.exp(rng.gauss(0, 0.01))
                                               for _ in range(3)]
        now = (moves.get(i, 1.0) * math.exp(statistics.fmean(map(math.log, history))),)
        if i not in moves and i % 2:
            now = (history[0],) if one_process else now  # half the rows exactly unchanged
        samples = [now[0] * math.exp(rng.gauss(0, 0.002)) for _ in range(9)]
        base = Stored("time", history[-1], "s", "lower", history=history,
                      history_saves=[len(history)],
                      samples=[history[-1] * math.exp(rng.gauss(0, 0.002)) for _ in range(9)]
                      if one_process else None)
        metric = Metric("time", now[0], "s", "lower", samples=samples if one_process else None)
        record = Record(f"t[size={i}]", "sweep", test="t", metrics=[metric])
        record.replicates["time"] = Replicates(now)
        rows.append((record, {"time": base}))
    return rows


@pytest.mark.parametrize("one_process", [False, True])
@pytest.mark.parametrize("can_confirm", [0, 2])
def test_a_change_within_the_familys_tails_is_held_as_arrays_as_row_by_row(
        one_process: bool, can_confirm: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """A caught or suspected change no larger than TAIL_MARGIN times the family's farthest
    move the other way is `ambiguous`, as arrays as row by row, and one just beyond is judged
    in full; where the spread between processes is unknown, the arrays leave the row to the
    full judgement (its rank test of the samples, its `unconfirmed`)."""
    rows = _tails_sweep(random.Random(9), one_process)
    rules = Rules(unconfirmed_alone=one_process)
    arrays_from(monkeypatch, 10**9)
    by_row = _judged(rows, rules, can_confirm)
    arrays_from(monkeypatch, 100)
    as_arrays = _judged(rows, rules, can_confirm)
    differ = [(a, b) for a, b in zip(by_row, as_arrays, strict=True) if not _agree(a, b)]
    assert not differ, differ[:2]
    within, beyond = [by_row[i] for i in (1, 3)], [by_row[i] for i in (2, 4)]
    if one_process and not can_confirm:
        # The rank test of the samples decided them (9 a side do not reach a family's
        # alpha), before any tails.
        assert all(v.p_value is not None and "within the tails" not in v.basis
                   for v in within + beyond)
    else:
        assert all(v.outcome == "ambiguous" and "within the tails" in v.basis for v in within)
        assert all(v.outcome == ("suspect" if can_confirm else "regressed") for v in beyond)
    if not one_process:
        # The held rows were the arrays' (Worded), not the full judgement's.
        assert all(isinstance(as_arrays[i], Worded) for i in (1, 3))
