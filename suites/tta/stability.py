"""How stable time to accuracy is across repeated runs: the coefficient of variation (CV) of
the runs that reached the target, the runs that did not, and how far same-seed runs drift.

Coleman et al. (2019) report the CV (standard deviation / mean) of time to accuracy across
independent runs of one entry. A run that hits the cap without reaching the target has no
time to accuracy: it is counted as "not reached" beside the CV, never dropped silently, since
dropping it would make an unstable configuration look stable.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from .training import Evaluation, Run


def coefficient_of_variation(values: Sequence[float]) -> float:
    """Sample standard deviation (n - 1) over the mean, as a fraction; NaN for fewer than two
    values (a spread of one run is undefined, not zero)."""
    if len(values) < 2:
        return math.nan
    mean = statistics.fmean(values)
    if mean <= 0:
        raise ValueError(f"the CV of times needs a positive mean, got {mean}")
    return statistics.stdev(values) / mean


def jackknife_cvs(values: Sequence[float]) -> list[float]:
    """The CV with each run left out in turn: how much the CV rests on any single run (their
    spread is the CV's uncertainty). Empty for fewer than three values."""
    if len(values) < 3:
        return []
    return [coefficient_of_variation([v for j, v in enumerate(values) if j != i])
            for i in range(len(values))]


@dataclass(frozen=True)
class Stability:
    runs: int
    times: list[float]  # time to accuracy of each run that reached the target, in run order
    epochs: list[float]  # epochs to the target of the same runs
    not_reached: int

    @classmethod
    def of(cls, runs: Sequence[Run]) -> Stability:
        reached = [r.at_target for r in runs if r.at_target is not None]
        return cls(runs=len(runs), times=[e.train_seconds for e in reached],
                   epochs=[e.epoch for e in reached], not_reached=len(runs) - len(reached))

    @property
    def reached(self) -> int:
        return self.runs - self.not_reached

    @property
    def cv(self) -> float:
        return coefficient_of_variation(self.times)


def max_curve_difference(curves: Sequence[Sequence[Evaluation]]) -> float:
    """Largest |accuracy difference| (points of %) between any curve and the first one, at the
    evaluations both made (same-seed runs evaluate at the same steps; one may stop earlier)."""
    if not curves:
        raise ValueError("no curves to compare")
    first = {e.step: e.accuracy for e in curves[0]}
    return max((abs(e.accuracy - first[e.step]) for curve in curves[1:] for e in curve
                if e.step in first), default=0.0)
