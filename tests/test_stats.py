"""Summaries of samples and the Mann-Whitney U test the comparisons rely on."""

from __future__ import annotations

import math
import random

import pytest

from pytest_hpml.measure.stats import mann_whitney_u, quantile, summarize


def test_quantile_interpolates_like_numpy() -> None:
    np = pytest.importorskip("numpy")
    data = sorted(random.Random(1).uniform(0, 10) for _ in range(17))
    for q in (0.0, 0.1, 0.25, 0.5, 0.75, 0.9, 1.0):
        assert quantile(data, q) == pytest.approx(float(np.quantile(data, q)))


def test_quantile_of_nothing_is_an_error() -> None:
    with pytest.raises(ValueError, match="no samples"):
        quantile([], 0.5)


def test_summary_fields() -> None:
    s = summarize([4.0, 1.0, 3.0, 2.0, 5.0])
    assert (s.n, s.median, s.min, s.mean) == (5, 3.0, 1.0, 3.0)
    assert s.iqr == pytest.approx(4.0 - 2.0)
    assert s.stdev == pytest.approx(math.sqrt(2.5))
    assert s.cv == pytest.approx(math.sqrt(2.5) / 3.0)
    assert s.relative_standard_error == pytest.approx(math.sqrt(2.5) / math.sqrt(5) / 3.0)


def test_summary_of_one_sample_has_no_spread() -> None:
    s = summarize([2.0])
    assert (s.stdev, s.iqr) == (0.0, 0.0)
    assert s.relative_standard_error == math.inf  # one sample never says "tight enough"
    with pytest.raises(ValueError):
        summarize([])


def _cases() -> list[tuple[list[float], list[float]]]:
    rng = random.Random(1234)
    cases = []
    for n1, n2, shift in [(10, 10, 0.0), (12, 15, 0.5), (30, 25, 0.1), (9, 40, 1.0),
                          (50, 50, 0.0)]:
        cases.append(([rng.gauss(0, 1) for _ in range(n1)],
                      [rng.gauss(shift, 1) for _ in range(n2)]))
    # Ties: timings quantized to a clock tick, and heavy ties across both sides.
    for n1, n2, levels in [(10, 12, 4), (20, 20, 3), (15, 30, 6)]:
        cases.append(([float(rng.randrange(levels)) for _ in range(n1)],
                      [float(rng.randrange(levels) + rng.randrange(2)) for _ in range(n2)]))
    cases.append(([1.0] * 10 + [2.0], [2.0] * 11))
    cases.append(([1.0, 2.0, 3.0] * 4, [4.0, 5.0, 6.0] * 4))  # fully separated
    return cases


@pytest.mark.parametrize("x, y", _cases())
def test_mann_whitney_matches_scipy(x: list[float], y: list[float]) -> None:
    stats = pytest.importorskip("scipy.stats")
    expected = stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic",
                                  use_continuity=True)
    u, p = mann_whitney_u(x, y)
    assert u == pytest.approx(expected.statistic)
    assert p == pytest.approx(expected.pvalue, rel=1e-9, abs=1e-15)


def test_mann_whitney_is_symmetric_in_p() -> None:
    x, y = [1.0, 2.5, 3.0, 4.0, 7.0], [2.0, 5.0, 6.0, 8.0, 9.0, 10.0]
    assert mann_whitney_u(x, y)[1] == pytest.approx(mann_whitney_u(y, x)[1])


def test_mann_whitney_all_identical_is_no_evidence() -> None:
    assert mann_whitney_u([1.0] * 10, [1.0] * 12)[1] == 1.0


def test_mann_whitney_needs_both_sides() -> None:
    with pytest.raises(ValueError, match="both sides"):
        mann_whitney_u([], [1.0])


def test_t_quantile_matches_the_tables_in_both_tails() -> None:
    from pytest_hpml.measure.stats import T_BOUND, t_cdf, t_quantile

    # Student's t table values (two-sided 95 % and 99 %, one-sided 99.9 %), and df=1's closed
    # form, tan(pi (p - 1/2)).
    for p, df, table in [(0.975, 10, 2.228138851986), (0.995, 1, 63.656741162871),
                         (0.95, 5, 2.015048373333), (0.999, 3, 10.214531852407),
                         (0.975, 1e5, 1.959987707535)]:
        assert t_quantile(p, df) == pytest.approx(table, rel=1e-9)
        assert t_quantile(1 - p, df) == pytest.approx(-table, rel=1e-9)
    # Fractional degrees of freedom (Welch-Satterthwaite), far tails: the inverse of t_cdf.
    for df in (0.4, 1.7, 3.3, 12.9, 250.0):
        for p in (1e-6, 0.01, 0.3, 0.7, 0.99, 1 - 1e-6):
            if df < 1 and min(p, 1 - p) < 1e-3:
                # far beyond T_BOUND (6e13 at df=0.4): the bound, as documented
                assert abs(t_quantile(p, df)) == pytest.approx(T_BOUND)
                continue
            assert t_cdf(t_quantile(p, df), df) == pytest.approx(p, rel=1e-9)
    assert t_quantile(0.5, 7.0) == 0.0
    with pytest.raises(ValueError, match="p must be in"):
        t_quantile(1.0, 3.0)


def test_float_stdev_agrees_with_the_exact_one() -> None:
    """The float standard deviation of timings (10k samples, spread over decades and bunched
    near one value alike) within 1e-12 of statistics' exact one, sample and population."""
    import random
    import statistics

    from pytest_hpml.measure.stats import float_stdev

    rng = random.Random(7)
    for data in ([rng.lognormvariate(-9, 1.5) for _ in range(10_000)],
                 [1e-3 + rng.gauss(0, 1e-9) for _ in range(5_000)], [2.5, 2.5], [1.0, 4.0]):
        assert float_stdev(data) == pytest.approx(statistics.stdev(data), rel=1e-12, abs=1e-300)
        assert float_stdev(data, population=True) == pytest.approx(statistics.pstdev(data),
                                                                   rel=1e-12, abs=1e-300)
    assert float_stdev([3.0]) == 0.0 and float_stdev([3.0], population=True) == 0.0
    assert float_stdev([]) == 0.0


def test_squares_within_pools_the_groups_of_two_values_or_more() -> None:
    from pytest_hpml.measure.stats import squares_within

    # [1, 2, 3]: 2.0 over 2 dof; [5] alone adds nothing; [4, 6]: 2.0 over 1 dof.
    squares, dof = squares_within([[1.0, 2.0, 3.0], [5.0], [4.0, 6.0]])
    assert squares == pytest.approx(4.0) and dof == 3
    assert squares_within([[1.0], []]) == (0.0, 0)
