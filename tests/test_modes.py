"""Benchmarks whose processes land in one of a few modes (issue 33 item 8): modes found in the
values of processes, learned across saves, a known mode no change, a switch of modes never a
failure."""

from __future__ import annotations

import math
import random

import pytest
from hpml_testing import Measured, compare_metric

from pytest_hpml.compare import modes

FAST, SLOW = 2.5e-3, 6.8e-3  # the JSON library's two modes


def _t(value: float, runs: list[float] | None = None, *, saves: list[list[float]] | None = None
       ) -> Measured:
    history = [v for save in saves for v in save] if saves else None
    return Measured("time", value, "s", "lower", runs=runs, history=history,
                    history_saves=[len(s) for s in saves] if saves else None)


def test_modes_are_groups_far_apart_compared_with_their_spread() -> None:
    assert len(modes.split([FAST, FAST * 1.01, SLOW, SLOW * 0.99, FAST * 0.99])) == 2
    # A noisy machine's spread is not a mode: no gap stands out from it.
    assert len(modes.split([1.0, 1.2, 0.85, 1.1, 0.9, 1.15])) == 1
    # Two values are too few to tell modes from noise, and a mode is two processes at least:
    # one process apart, beside processes that agree to the digit, is an outlier or a change.
    assert len(modes.split([FAST, SLOW])) == 1
    assert len(modes.split([4.0, 4.0, 4.0, 4.4, 6.0])) == 1


def test_a_process_at_a_mode_the_history_knows_is_no_change() -> None:
    # Two saves: one landed fast, one slow. Now every process lands slow.
    history = _t(FAST, saves=[[FAST, FAST * 1.01, FAST * 0.99], [SLOW, SLOW * 0.99, SLOW]])
    verdict = compare_metric(_t(SLOW * 1.005, [SLOW, SLOW * 1.01]), history, can_confirm=2)
    assert verdict.outcome == "unchanged", verdict.basis
    assert "bimodal: modes at" in verdict.basis and verdict.baseline == pytest.approx(SLOW,
                                                                                     rel=0.01)


def test_a_slower_mode_is_a_regression_measured_from_its_nearest_mode() -> None:
    history = _t(FAST, saves=[[FAST, FAST * 1.01, FAST * 0.99], [SLOW, SLOW * 0.99, SLOW],
                              [FAST * 1.005, FAST, SLOW * 1.01]])
    # The fast mode 40 % slower in every process: not a known mode.
    verdict = compare_metric(_t(FAST * 1.4, [FAST * 1.41, FAST * 1.39]), history)
    assert verdict.outcome == "regressed" and verdict.change == pytest.approx(0.4, abs=0.02)


def test_a_switch_of_modes_the_history_never_saw_is_said_and_never_fails() -> None:
    # The save's three processes all landed fast; this run's own process and one of its
    # confirmations land slow, the other fast: the benchmark is bimodal, and that is all.
    history = _t(FAST, saves=[[FAST, FAST * 1.01, FAST * 0.99]])
    verdict = compare_metric(_t(SLOW, [SLOW * 1.01, FAST]), history)
    assert verdict.outcome == "ambiguous" and verdict.blind
    assert "landed in 2 modes" in verdict.basis and "a save learns the new mode" in verdict.basis


def test_every_process_in_a_mode_never_seen_is_judged_as_any_change() -> None:
    # Nothing tells a mode the history never saw from a slowdown: three processes agree.
    history = _t(FAST, saves=[[FAST, FAST * 1.01, FAST * 0.99]])
    assert compare_metric(_t(SLOW, [SLOW * 1.01, SLOW * 0.99]), history,
                          drift=0.0).outcome == "regressed"


@pytest.mark.parametrize("gap", [modes.MODE_GAP, modes.ONE_OCCASION_GAP])
def test_values_that_could_hold_no_modes_are_one_group_by_the_full_split(gap: float) -> None:
    """could_hold_modes (split's shortcut, and the level screen's test) says no only where the
    full cutting of the values finds one group: on random values of one to three levels, with
    lone outliers; at either least gap between modes."""
    rng = random.Random(3)
    told_apart = 0
    for _ in range(3000):
        levels = [rng.uniform(1, 3) for _ in range(rng.randint(1, 3))]
        values = [rng.choice(levels) * math.exp(rng.gauss(0, rng.choice([0.005, 0.05, 0.2])))
                  for _ in range(rng.randint(1, 12))]
        if rng.random() < 0.3:
            values.append(values[0] * rng.uniform(2, 50))  # a preempted call
        logs = sorted(math.log(v) for v in values)
        if not modes.could_hold_modes(values, gap):
            assert len(modes._split(logs, gap)) == 1, values
        else:
            told_apart += len(modes._split(logs, gap)) > 1
    assert told_apart > 100  # not vacuous: many of the others do hold modes
