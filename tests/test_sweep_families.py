"""The rows of one test that record the same metric (a sweep) are judged as one family
(compare/families.py): a sweep of many rows compared unchanged fails on no row, and a slowdown
of some of its rows is still caught, on them alone."""

from __future__ import annotations

import json
import math
import random

import pytest
from hpml_testing import FAST, save_in_processes, verdicts_of

from pytest_hpml.compare import engine, families, family_finder
from pytest_hpml.compare.families import MIN_POOLED_ROWS, Family, Spread, pooled_spread
from pytest_hpml.compare.noise import Noise
from pytest_hpml.compare.stored import Stored
from pytest_hpml.results import Metric, Record, Replicates

#: A sweep of single calls on a machine of two speeds: each row of each process lands in the
#: fast speed or the 50 % slower one by chance, a new draw in every process (the rows of the
#: 10 000-row cost test did so by turns). `slower` rows are made 4x slower.
SWEEP = """
import random

ROWS = {rows}


def test_sweep(hpml):
    draw = random.Random()  # seeded by the OS: every process its own draw
    for i in range(ROWS):
        value = 1e-3 * (1.5 if draw.random() < 0.5 else 1.0) * (1 + 0.01 * draw.random())
        if i < {slower}:
            value *= 4
        if i == {slow_row}:
            value *= 5  # a collection that lands in this row's call, in every process of a side
        with hpml.row(size=i) as row:
            row.record("time", value, unit="s", better="lower")
"""


def _compare(pytester: pytest.Pytester, slower: int, slow_row: int = -1
             ) -> tuple[pytest.RunResult, dict]:
    pytester.makepyfile(test_sweep=SWEEP.format(rows=1000, slower=slower, slow_row=slow_row))
    out = pytester.path / "compare.json"
    result = pytester.runpytest(*FAST, "--hpml-compare", f"--hpml-report={out}")
    return result, json.loads(out.read_text(encoding="utf-8"))


@pytest.fixture
def saved(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_sweep=SWEEP.format(rows=1000, slower=0, slow_row=100))
    pytester.runpytest(*save_in_processes(3)).assert_outcomes(passed=1)
    return pytester


def _regressed(document: dict) -> list[int]:
    return sorted(int(test.rsplit("size=", 1)[1].rstrip("]"))
                  for test, metrics in verdicts_of(document).items()
                  if metrics.get("time", {}).get("outcome") == "regressed")


def test_a_sweep_compared_unchanged_fails_on_no_row(saved: pytest.Pytester) -> None:
    # Judged row by row, about one row in 64 has its three saved processes fast and its three
    # compared ones slow: 15 rows of 1000 "regressed", confirmed, on unchanged code.
    result, document = _compare(saved, slower=0, slow_row=100)
    assert _regressed(document) == [], result.stdout.str()[-3000:]
    result.assert_outcomes(passed=1)
    assert any("the test's 1000 rows" in metrics["time"].get("basis", "")
               for metrics in verdicts_of(document).values())
    # The terminal lists a sweep's blind spots up to five rows, then counts the others.
    said = [line for line in result.outlines if "blind spot:" in line]
    blind = sum(1 for metrics in verdicts_of(document).values() if metrics["time"].get("blind"))
    assert blind > 5 and len(said) == 5, said
    assert f"{blind - 4} more rows are blind spots too" in said[-1]


def test_a_row_slow_on_one_side_as_another_was_on_the_other_fails_nothing(
        saved: pytest.Pytester) -> None:
    # Row 100 was 5x slower in every process of the save, row 700 is in every process now: what
    # a collection landing at another row on each side does. Row 700 alone would read a
    # confirmed +400 %; row 100 moved as far the other way, and the family shows it.
    result, document = _compare(saved, slower=0, slow_row=700)
    assert _regressed(document) == [], result.stdout.str()[-3000:]
    result.assert_outcomes(passed=1)
    verdict = verdicts_of(document)["test_sweep.py::test_sweep[size=700]"]["time"]
    assert verdict["outcome"] == "ambiguous" and "within the tails" in verdict["basis"]


def test_rows_that_slowed_down_are_caught_and_no_other(saved: pytest.Pytester) -> None:
    result, document = _compare(saved, slower=30, slow_row=100)  # row 100 as in the save
    result.assert_outcomes(failed=1)
    assert _regressed(document) == list(range(30))


def test_the_pooled_spread_reads_a_machine_of_two_speeds() -> None:
    # Rows of three processes a side, each value in one of two speeds 50 % apart: the median
    # of the rows' spreads sees the two speeds, where most rows' own spread would not.
    rows = []
    for i in range(200):
        before = [1.0 if (i >> k) & 1 else 1.5 for k in range(3)]
        after = [1.0 if (i >> k) & 1 else 1.5 for k in range(3, 6)]
        rows.append((before, [3], after))
    spread = pooled_spread(rows)
    assert spread is not None and spread.dof == 4 * 200
    assert 0.15 < spread.between < 0.4  # ln(1.5) = 0.41 apart
    assert spread.changes is not None and spread.changes > 0.1
    assert pooled_spread(rows[:MIN_POOLED_ROWS - 1]) is None


def test_a_family_only_ever_raises_a_rows_noise() -> None:
    family = Family(1000, {"": Spread(between=0.2, dof=4000, changes=0.5)})
    assert family.alpha(0.01) == pytest.approx(1e-5)
    quiet = Noise(between=0.01, dof=4, within=0.0, drift=0.05, runs_now=3, runs_before=3)
    floored = family.floor(quiet, "")
    assert floored.between == 0.2 and floored.dof == 4000
    # What the rows' changes show beyond the processes' spread is the rows' drift.
    assert floored.drift == pytest.approx(math.sqrt((0.25 - 0.04 * 2 / 3) / 2))
    noisy = Noise(between=0.9, dof=4, within=0.0, drift=0.05, runs_now=3, runs_before=3)
    assert family.floor(noisy, "").between == 0.9  # its own spread, larger, is kept
    assert family.floor(quiet, "relative to the machine's yardstick") is quiet


def _sweep(rng: random.Random, rows: int) -> tuple[list[Record], dict[str, dict[str, Stored]]]:
    """A test's sweep of `rows` rows, each timed once now, against 3 saves of 2 processes."""
    records, bases = [], {}
    for i in range(rows):
        history = [math.exp(rng.gauss(0, 0.05)) for _ in range(6)]
        record = Record(f"t[size={i}]", "sweep", test="t", metrics=[
            Metric("time", math.exp(rng.gauss(0, 0.05)), "s", "lower")])
        records.append(record)
        bases[record.id] = {"time": Stored("time", history[-1], "s", "lower", history=history,
                                           history_saves=[2, 2, 2])}
    return records, bases


@pytest.mark.parametrize("rows", [2 * MIN_POOLED_ROWS, 300])  # row by row; as arrays
def test_families_found_again_after_rounds_are_those_found_from_scratch(
        rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Rounds of fresh processes over random rows (some measured again), and a round that also
    # measured the evidence again (a git ref's, which the pass cannot take from the last): each
    # pass's families are those found from scratch, and only the rows a round measured (and
    # the row whose evidence moved) are taken again.
    rng = random.Random(rows)
    records, bases = _sweep(rng, rows)
    memo = engine.FamilyMemo()
    assert engine.families(records, bases, memo) == engine.families(records, bases)
    taken: list[int] = []
    real = family_finder._share_as_arrays, family_finder._share
    monkeypatch.setattr(family_finder, "_share_as_arrays",
                        lambda memo, rows: taken.append(len(rows)) or real[0](memo, rows))
    monkeypatch.setattr(family_finder, "_share",
                        lambda *row: taken.append(1) or real[1](*row))
    quick: list[bool] = []
    again_of = family_finder._found_again
    monkeypatch.setattr(family_finder, "_found_again",
                        lambda *a: quick.append((found := again_of(*a)) is not None) or found)
    for round_ in range(4):
        taken.clear()
        measured = rng.sample(records, 7)
        for record in measured:
            fresh = [Metric("time", math.exp(rng.gauss(0.3, 0.1)), "s", "lower")]
            record.replicates["time"] = engine.merge(record.values_of("time"), fresh)
        if round_ == 3:  # a row's evidence measured again: the pass found from scratch
            moved = records[0].id
            bases = {**bases, moved: {"time": Stored("time", 1.0, "s", "lower",
                                                     history=[1.0, 1.1], history_saves=[2])}}
        again = engine.families(records, bases, memo)
        assert sum(taken) == len({r.id for r in measured} | ({moved} if round_ == 3 else set()))
        assert again == family_finder.families(records, bases), round_
    assert quick == [True, True, True, False]


def test_a_comparison_finds_its_families_again_from_the_rows_a_round_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A comparison judges again after each round of confirmation; the rows' shares of their
    family are kept (engine.FamilyMemo) and taken again only for the rows whose values the
    round changed: the families found are those found from scratch."""
    rng = random.Random(3)
    records, bases = _sweep(rng, 2 * MIN_POOLED_ROWS)
    memo = engine.FamilyMemo()
    first = engine.families(records, bases, memo)
    assert first == engine.families(records, bases)
    taken = []
    real = families.row_share
    monkeypatch.setattr(family_finder, "row_share", lambda *a: taken.append(a) or real(*a))
    for record in records[:3]:  # a round of confirmation measured three rows, 3x slower
        fresh = [Metric("time", 3 * record.metrics[0].value, "s", "lower")]
        record.replicates["time"] = engine.merge(record.values_of("time"), fresh)
    again = engine.families(records, bases, memo)
    assert len(taken) == 3  # only the rows the round measured
    monkeypatch.setattr(family_finder, "row_share", real)
    assert again == engine.families(records, bases) != first


@pytest.mark.parametrize("rows", [2 * MIN_POOLED_ROWS, 300])  # row by row; as arrays
def test_a_row_whose_series_changed_in_a_round_has_its_families_found_from_scratch(
        rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # Row 0's evidence timed the yardstick, its first process did not; a round's fresh process
    # did (values relative to the yardstick now join the comparison): the shares pooled before
    # are not the row's now, and the pass finds the families from scratch.
    rng = random.Random(rows + 1)
    records, bases = _sweep(rng, rows)
    first = records[0]
    old = bases[first.id]["time"]
    bases[first.id] = {"time": Stored("time", old.value, "s", "lower", history=old.history,
                                      history_saves=old.history_saves,
                                      relative_history=[v / 2 for v in old.history])}
    memo = engine.FamilyMemo()
    before = engine.families(records, bases, memo)
    assert before == engine.families(records, bases)
    quick: list[bool] = []
    again_of = family_finder._found_again
    monkeypatch.setattr(family_finder, "_found_again",
                        lambda *a: quick.append((found := again_of(*a)) is not None) or found)
    now = first.values_of("time").values[0]
    first.replicates["time"] = Replicates((now, now * 1.01), (now / 2, now * 1.01 / 2))
    again = engine.families(records, bases, memo)
    assert quick == [False]
    assert again == family_finder.families(records, bases)
    assert len(memo[first.id, "time"][2]) == 2  # its shares as measured and relative
