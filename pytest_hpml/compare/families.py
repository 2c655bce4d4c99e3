"""The rows of one test that record the same metric (a sweep's rows, measured in the same
processes) form a family, and are judged together (a value of the compare stage, used by the
engine and verdicts.py).

Judging a sweep of N rows row by row, as if each were the only one, goes wrong three ways:

- multiplicity: a row judged at level alpha fails on noise with probability alpha, so a test
  of 10 000 rows fails on unchanged code (41-182 rows "regressed" here, confirmed). A test fails
  when any of its rows does, so its rows are judged at alpha / N (Bonferroni): the test fails on
  noise with probability at most alpha, as a test of one row does.
- a row of few values knows little of its own spread: the three processes of a single-call
  row can all land in one of a machine's two speeds by chance, and their spread then reads 1 %
  where the row moves by 50 %. Its siblings, measured in the same processes, have shown the
  spread: in a family of MIN_POOLED_ROWS rows or more, a row's spread between processes is
  never taken below the median of the rows' spreads within an occasion (the processes of one
  save, this run's), and its drift between occasions never below what the rows' changes
  (evidence to now) show beyond that spread, around their median change, which a change of the
  whole sweep (the machine's drift, or the code's) does not widen;
- a single call's timing has tails no spread describes: a garbage collection or a preemption
  lands in one row's call in every process of one side (the allocations before it are the
  same there) and in another row's on the other side. A row changed no more than TAIL_MARGIN
  times as far as some row of the family moved the other way is not told from that.

The floor only ever raises a row's noise: a noisy row keeps its own spread, and a quiet row of
a family of noisy ones detects less than it would alone (the price of a pooled estimate).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

from pytest_hpml.compare.noise import Noise, logs, occasions
from pytest_hpml.frozen import evolve
from pytest_hpml.measure.stats import quantile, squares_within
from pytest_hpml.results import Verdict

#: Rows a family needs before their pooled spread is a floor for each row's: fewer rows of a
#: sweep over sizes are too unlike each other (a 1 KiB row and a 1 GiB row) to share one.
MIN_POOLED_ROWS = 30

#: How far beyond the family's farthest move the other way a row's change must lie (in logs)
#: to be told from it: the farthest moves on the two sides are alike, not equal (a collection
#: landing in one row's call here and in another's at the other side), and which side holds
#: the larger is chance.
TAIL_MARGIN = 1.5

#: One row's series: its stored values (oldest first), how many each save added, and this
#: run's processes' values.
RowSeries = tuple[list[float], list[int] | None, list[float]]


@dataclass(frozen=True)
class Spread:
    """What a family's rows show together for one series: the spread between processes of one
    occasion (None where no row has two), and the spread of the rows' changes between the
    evidence and this run around their median change (None for too few rows)."""

    between: float | None  # stdev of ln(value) between processes, pooled
    dof: int
    changes: float | None  # stdev of the rows' ln changes
    # The rows' ln changes around their median: the median, and the farthest below and above.
    tails: tuple[float, float, float] | None = None


@dataclass(frozen=True)
class Family:
    """The rows of a test recording one metric against evidence, and what they show together,
    per series (the label of verdicts' Evidence: "" as measured, or relative to the yardstick
    or the compute pace)."""

    rows: int
    spreads: Mapping[str, Spread]

    def alpha(self, alpha: float) -> float:
        """The level each row is judged at: the test's alpha shared by its rows."""
        return alpha / max(self.rows, 1)

    def floor(self, noise: Noise, label: str) -> Noise:
        """`noise` with its spread between processes at least the family's, and its drift
        between occasions at least what the rows' changes show beyond that spread."""
        spread = self.spreads.get(label)
        if spread is None:
            return noise
        raised: dict[str, object] = {}  # one Noise built, not one per field raised
        between = noise.between
        if spread.between is not None and (between is None or between < spread.between):
            between = spread.between
            raised.update(between=between, dof=spread.dof, pooled_rows=self.rows)
        if spread.changes is not None:
            # A row's change spreads by its processes' spread (fewer with more processes) and
            # by how the row itself moved between the occasions, which no process averages out
            # (a call that lands in a machine's slow speed at the same point of every process
            # of one run): that part is the row's drift.
            processes = (between or 0.0) ** 2 * (1 / noise.runs_now + 1 / noise.runs_before)
            drift = math.sqrt(max(0.0, spread.changes ** 2 - processes) / noise.drift_weight)
            if drift > noise.drift:
                raised.update(drift=drift, drift_dof=self.rows - 1, pooled_rows=self.rows,
                              pooled_drift=True)
        return evolve(noise, **raised) if raised else noise

    def within_tails(self, label: str, change: float | None) -> str | None:
        """Where a row's change (row_change) is no larger than TAIL_MARGIN times the farthest
        some row of the family moved the other way from the rows' median change, what a verdict
        held within the tails says (tails_said); None where it is larger (or nothing is known).
        Under unchanged code the rows' changes spread both ways alike (a collection that lands
        in a row's timed call on one side lands in another row's on the other), so a row
        changed that far is one the family shows on unchanged rows too. Measured from no
        change, not from the median: a slowdown of the whole sweep moves the median, not the
        rows' spread, and stays beyond."""
        tails = self.tails(label)
        if tails is None or change is None:
            return None
        if abs(change) > TAIL_MARGIN * farthest_other_way(tails, change > 0):
            return None
        return self.tails_said(tails, change > 0)

    def tails(self, label: str) -> tuple[float, float, float] | None:
        """The rows' median change of the series `label` and their farthest moves from it
        below and above (in logs), where known."""
        spread = self.spreads.get(label)
        return None if spread is None else spread.tails

    def tails_said(self, tails: tuple[float, float, float], up: bool) -> str:
        """Why a row whose change went `up` (or down) within the family's `tails` is held."""
        farthest = farthest_other_way(tails, up)
        other = f"{math.expm1(-farthest if up else farthest):+.1%}"
        return (f"within the tails of the test's {self.rows} rows: one of them moved {other} "
                "the other way, so a row's change this large is one this sweep shows unchanged")

    def hold_within_tails(self, verdict: Verdict, history: list[float], now: list[float]
                          ) -> Verdict:
        """`verdict` (regressed, improved or suspect) of a row whose values as measured are
        `history` and `now`; `ambiguous` where the row's change lies within the family's tails
        (within_tails): a sweep's single calls land a collection or a preemption in one row on
        one side and in another row on the other (a row 5x slower in all three processes here,
        on unchanged code), and the family shows how far such moves reach."""
        said = self.within_tails("", row_change(history, now))
        if said is None:
            return verdict
        return evolve(verdict, outcome="ambiguous", basis=f"{verdict.basis}; {said}",
                      blind=verdict.blind or said)


def farthest_other_way(tails: tuple[float, float, float], up: bool) -> float:
    """How far (in logs) some row of a family moved from the rows' median change the other
    way from a change that went `up` (or down)."""
    _, low, high = tails
    return -low if up else high


#: What one row adds to its family for one series: the sum of squares of ln(value) between
#: its processes within each occasion, their degrees of freedom, and its change (row_change).
RowShare = tuple[float, int, float | None]


def row_share(history: list[float], saves: list[int] | None, now: list[float]) -> RowShare:
    """One row's share of its family's spread (its series as RowSeries gives it)."""
    squares, dof = squares_within((*(logs(g) for g in occasions(history, saves)), logs(now)))
    return squares, dof, row_change(history, now)


def pooled_spread(rows: list[RowSeries]) -> Spread | None:
    """What the rows show together (pooled, from each row's series)."""
    return pooled([row_share(*row) for row in rows])


def pooled(shares: list[RowShare]) -> Spread | None:
    """What the rows show together, from each row's share; None for fewer than
    MIN_POOLED_ROWS rows that show it.

    Robust to the rows a preempted call blew up (a single call's value moves by 100x when the
    scheduler takes its core): the median of the rows' spreads between processes, scaled to a
    stdev as for normal values; and the 90th percentile of the changes' distances from their
    median change (a median distance would miss a machine of two speeds, where most rows change
    by nothing and a quarter by 50 %)."""
    variances, dofs, changes = [], [], []
    for squares, dof, change in shares:
        if dof:
            variances.append(squares / dof)
            dofs.append(dof)
        if change is not None:
            changes.append(change)
    between, total_dof = None, 0
    if len(variances) >= MIN_POOLED_ROWS:
        k = statistics.median(dofs)
        # The median of a variance of k degrees of freedom over the true one (Wilson and
        # Hilferty's approximation of the chi-square's median over k).
        between = math.sqrt(statistics.median(variances) / (1 - 2 / (9 * k)) ** 3)
        total_dof = sum(dofs)
    spread_of_changes, tails = None, None
    if len(changes) >= MIN_POOLED_ROWS:
        center = statistics.median(changes)
        spread_of_changes = (quantile(sorted(abs(x - center) for x in changes), 0.9)
                             / NormalDist().inv_cdf(0.95))
        tails = (center, min(changes) - center, max(changes) - center)
    if between is None and spread_of_changes is None:
        return None
    return Spread(between, total_dof, spread_of_changes, tails)


def row_change(history: list[float], now: list[float]) -> float | None:
    """A row's change as its family weighs it: the mean of ln(value) now less the stored one."""
    before, after = logs(history), logs(now)
    if not before or not after:
        return None
    return statistics.fmean(after) - statistics.fmean(before)
