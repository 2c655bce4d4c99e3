"""Summaries of timing samples and the two-sample test used by baseline comparisons."""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from statistics import NormalDist


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


def float_stdev(values: Sequence[float], population: bool = False) -> float:
    """The standard deviation of floats, in float arithmetic (two passes, the sums exactly
    rounded): statistics.stdev converts every value to an exact fraction, 0.1-0.2 s for the
    10k samples of a 10 us call, in every timing and fresh process. 0.0 for fewer than two
    values (one for the population's)."""
    n = len(values)
    if n < (1 if population else 2):
        return 0.0
    return math.sqrt(_squares(values) / (n if population else n - 1))


def _squares(values: Sequence[float]) -> float:
    """The sum of squared deviations of floats from their mean, both sums exactly rounded."""
    mean = math.fsum(values) / len(values)
    return math.fsum([(v - mean) * (v - mean) for v in values])


def squares_within(groups: Iterable[Sequence[float]]) -> tuple[float, int]:
    """The sum of squared deviations from their own mean within each group of two values or
    more, and its degrees of freedom: what a pooled variance divides (squares / dof)."""
    squares, dof = 0.0, 0
    for group in groups:
        if len(group) >= 2:  # float_stdev's sums, without its square root squared again
            squares += _squares(group)
            dof += len(group) - 1
    return squares, dof


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
        stdev=float_stdev(data),
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


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b), by its continued fraction
    (modified Lentz), evaluated where it converges fast and mirrored elsewhere."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _incomplete_beta(b, a, 1.0 - x)
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                     + a * math.log(x) + b * math.log1p(-x)) / a
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 500):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-14:
            break
    return front * f


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom."""
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


#: How far out t_quantile looks: beyond it a quantile is this bound (a detectable change
#: of exp(1e6 x spread) is blind whatever the exact figure).
T_BOUND = 1e6


def _t_log_density(t: float, df: float) -> float:
    return (math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
            - (df + 1) / 2 * math.log1p(t * t / df))


@functools.lru_cache(maxsize=1 << 16)
def t_quantile(p: float, df: float) -> float:
    """The t with P(T <= t) = p: Newton's method on t_cdf from the Cornish-Fisher expansion
    of the normal quantile, kept inside a bracket that bisection narrows wherever a step
    would leave it. A comparison asks for it once per metric and per process count it tries
    (hundreds of thousands for a sweep of 10k rows): plain bisection from +-1e6 took 55
    evaluations of the incomplete beta function each, minutes in all."""
    if not 0 < p < 1:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if df <= 0:
        raise ValueError(f"degrees of freedom must be > 0, got {df}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    if p == 0.5:
        return 0.0
    z = NormalDist().inv_cdf(p)
    guess = (z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)
             + (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / (384 * df ** 3))
    lo, hi = 0.0, T_BOUND
    t = min(max(guess, 1e-12), T_BOUND / 2)
    for _ in range(200):
        below = t_cdf(t, df) - p
        if below == 0:
            return t
        if below < 0:
            lo = t
        else:
            hi = t
        density = math.exp(_t_log_density(t, df))
        step = below / density if density > 0 else math.inf
        if abs(step) <= 1e-13 * max(1.0, abs(t)):
            return t - step
        new = t - step
        if not lo < new < hi:
            new = (lo + hi) / 2  # a step out of the bracket (a flat tail): bisect instead
        if hi - lo <= 1e-13 * max(1.0, hi):
            return new
        t = new
    return t


def median_uncertainty(samples: Sequence[float]) -> float:
    """Relative half-width of the ~95 % interval of a median (the notch of McGill, Tukey and
    Larsen 1978: 1.57 IQR / sqrt(n)), over the median; 0 with fewer than 5 samples."""
    if len(samples) < 5:
        return 0.0
    s = summarize(samples)
    return 1.57 * s.iqr / math.sqrt(s.n) / s.median if s.median > 0 else 0.0


#: The fewest samples whose 10th and 90th percentiles stand for a run's fast and slow calls.
MIN_SAMPLES_FOR_DECILES = 20


def deciles(samples: Sequence[float]) -> tuple[float, float] | None:
    """The 10th and 90th percentiles of a run's samples: how fast its fast calls and how slow
    its slow ones were, levels that the share of slow calls hardly moves (a median follows
    that share); None with fewer than MIN_SAMPLES_FOR_DECILES samples."""
    if len(samples) < MIN_SAMPLES_FOR_DECILES:
        return None
    ordered = sorted(samples)
    return quantile(ordered, 0.1), quantile(ordered, 0.9)
