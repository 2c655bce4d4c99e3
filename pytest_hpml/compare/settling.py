"""Measuring again (a part of the compare stage, used by the comparisons): which rows of a
judged test more processes could change, the seconds a comparison may spend on them, and the
loop that measures again and judges again until the fresh processes settle the suspicion."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from pytest_hpml.compare.verdicts import SUSPECT
from pytest_hpml.results import Metric, Record, Verdict

T = TypeVar("T")


def suspected(record: Record) -> bool:
    return any(v.outcome == SUSPECT for v in record.verdicts.values())


def unsettled(record: Record, worse_only: bool = False) -> bool:
    """Whether more processes could change a verdict of the row: one that is not `unchanged`
    (nor new, missing or incomparable, which no measurement changes), of a figure that is not
    exact (an exact figure is the same in every process). worse_only: only a change the worse
    way (or one with no number to point a way) can; an apparent improvement fails nothing."""
    return any(v.outcome not in ("unchanged", "new", "missing", "incomparable")
               and not (m is not None and m.exact)
               and (not worse_only or m is None or _points_worse(m, v))
               for name, v in record.verdicts.items() for m in [record.metric(name)])


def measured_since(record: Record) -> bool:
    """Whether a metric of the row holds values of more processes than its verdict rests on."""
    # Only replicates can hold more than the test's own process: a row no fresh process
    # measured has none (a 10 000-row sweep's rows were asked 10 000 times a round).
    merged = record.replicates
    return bool(merged) and any(
        v.processes is not None and name in merged and len(merged[name].values) > v.processes
        for name, v in record.verdicts.items())


def _points_worse(metric: Metric, verdict: Verdict) -> bool:
    """Whether the verdict's change is the metric's worse way (a change that is not a number
    counts as worse: it says nothing either way). A metric with no better way has none."""
    if metric.better is None:
        return False
    change = verdict.change
    if change is None or not math.isfinite(change):
        return True
    return change > 0 if metric.better == "lower" else change < 0


@dataclass
class Budget:
    """Seconds a comparison may spend measuring again (0: no limit), and what it has spent."""

    seconds: float = 0.0
    spent: float = 0.0

    @property
    def left(self) -> bool:
        return not self.seconds or self.spent < self.seconds

    def spend(self, act: Callable[[], T]) -> T:
        """act(), its seconds counted as spent."""
        started = time.monotonic()
        try:
            return act()
        finally:
            self.spent += time.monotonic() - started


def settle(records: list[Record], judge_all: Callable[[int, list[Record]], None],
           needs_more: Callable[[Record], bool], measure_more: Callable[[list[Record]], None],
           rounds: int, budget: Budget | None = None) -> int:
    """Judge, then measure again and judge again while a row `needs_more` and rounds and
    budget are left: every round while the fresh processes still show a change (stopping at
    the first that agrees would be a test repeated until it passes), none once they dispel
    it. `judge_all(left, rows)` judges `rows` (all of `records` first, then those more
    processes could change) with `left` rounds still possible; returns the rounds measured.

    A row settled `unchanged` keeps its verdict, judged on the test's own process as in a
    comparison that needed no fresh one: judged again, a round's own preempted calls became
    the next round's suspects (a 10 000-row sweep's first confirmation dispelled its 3-7
    suspected rows and made 10-32 others suspect). The others are judged again where the
    round measured them: a slowed row whose first process landed in a machine's fast speed
    reads `ambiguous` there, and is caught with the processes its siblings' suspicion ran."""
    budget = budget or Budget()
    left = rounds
    judge_all(left, records)
    pending = [r for r in records if needs_more(r)]
    done = 0
    while pending and left and budget.left:
        budget.spend(lambda: measure_more(pending))  # noqa: B023 - called at once
        left -= 1
        done += 1
        asked = {id(r) for r in pending}
        judge_all(left, [r for r in records if id(r) in asked
                         or (measured_since(r) and unsettled(r))])
        pending = [r for r in records if needs_more(r)]
    if left and pending:
        judge_all(0, pending)  # the budget ran out: final verdicts on what was measured
    return done
