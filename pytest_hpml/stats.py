"""Summaries of timing samples and the two-sample test used by baseline comparisons."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass


def quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted data (numpy's default method)."""
    if not sorted_values:
        raise ValueError("quantile of no samples")
    pos = (len(sorted_values) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    iqr: float
    min: float
    mean: float
    stdev: float

    @property
    def cv(self) -> float:
        """Coefficient of variation: stdev / mean."""
        return self.stdev / self.mean if self.mean else math.inf

    @property
    def relative_standard_error(self) -> float:
        """Standard error of the mean relative to the mean: the adaptive stopping rule."""
        if self.n < 2 or not self.mean:
            return math.inf
        return self.stdev / math.sqrt(self.n) / self.mean


#: IQR / median at or above this makes a set of samples "noisy" (the one place this is decided).
NOISY_IQR_RATIO = 0.10


def noise_ratio(summary: Summary) -> float | None:
    """IQR / median when the samples are noisy by that rule, else None."""
    if summary.median > 0 and summary.iqr / summary.median >= NOISY_IQR_RATIO:
        return summary.iqr / summary.median
    return None


def summarize(samples: Sequence[float]) -> Summary:
    if not samples:
        raise ValueError("cannot summarize zero samples")
    data = sorted(samples)
    return Summary(
        n=len(data),
        median=quantile(data, 0.5),
        iqr=quantile(data, 0.75) - quantile(data, 0.25),
        min=data[0],
        mean=statistics.fmean(data),
        stdev=statistics.stdev(data) if len(data) > 1 else 0.0,
    )


def mann_whitney_u(x: Sequence[float], y: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test: returns (U of x, p-value).

    Normal approximation with tie correction and continuity correction. The comparisons only
    run it when both sides have at least 9 samples, where the approximation is adequate.
    """
    n1, n2 = len(x), len(y)
    if n1 == 0 or n2 == 0:
        raise ValueError("Mann-Whitney U needs samples on both sides")
    pooled = sorted([(v, 0) for v in x] + [(v, 1) for v in y])
    ranks = [0.0] * len(pooled)
    tie_term = 0.0
    i = 0
    while i < len(pooled):
        j = i
        while j + 1 < len(pooled) and pooled[j + 1][0] == pooled[i][0]:
            j += 1
        average_rank = (i + j) / 2 + 1  # ranks are 1-based
        for k in range(i, j + 1):
            ranks[k] = average_rank
        t = j - i + 1
        tie_term += t**3 - t
        i = j + 1
    rank_sum_x = sum(r for r, (_, side) in zip(ranks, pooled, strict=True) if side == 0)
    u_x = rank_sum_x - n1 * (n1 + 1) / 2
    mean_u = n1 * n2 / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if variance <= 0:  # every value identical: no evidence of a difference
        return u_x, 1.0
    z = (abs(u_x - mean_u) - 0.5) / math.sqrt(variance)
    p = math.erfc(max(z, 0.0) / math.sqrt(2))
    return u_x, min(1.0, p)
