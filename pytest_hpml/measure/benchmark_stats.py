"""benchmark.stats: the samples pytest-hpml took for the `benchmark` fixture, under
pytest-benchmark's field names (pytest_hpml.benchmark_fixture makes them)."""

from __future__ import annotations

import functools
import math
import statistics
from typing import Any

from pytest_hpml.measure.stats import float_stdev, quantile


class BenchmarkStats:
    """The seconds per call of each sample, with pytest-benchmark's field names. Its tests
    read them as benchmark.stats.stats.mean, benchmark.stats["mean"] or
    benchmark.stats.get("mean"); all three work. Quartiles interpolate linearly (numpy's
    default), as pytest-hpml's reports do."""

    fields = ("min", "max", "mean", "stddev", "rounds", "median", "iqr", "q1", "q3",
              "iqr_outliers", "stddev_outliers", "outliers", "ld15iqr", "hd15iqr", "ops",
              "total")

    def __init__(self, data: list[float], iterations: int, fixture: Any) -> None:
        self.data = list(data)
        self.iterations = iterations
        self.name, self.fullname = fixture.name, fixture.fullname
        self.group, self.param, self.params = fixture.group, fixture.param, fixture.params
        self.extra_info = fixture.extra_info

    @property
    def stats(self) -> BenchmarkStats:
        return self  # pytest-benchmark nests them: benchmark.stats.stats.mean

    def __bool__(self) -> bool:
        return bool(self.data)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key, default)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.fields}

    @functools.cached_property
    def _sorted(self) -> list[float]:
        return sorted(self.data)

    min = property(lambda self: self._sorted[0])
    max = property(lambda self: self._sorted[-1])
    mean = property(lambda self: statistics.fmean(self.data))
    median = property(lambda self: quantile(self._sorted, 0.5))
    q1 = property(lambda self: quantile(self._sorted, 0.25))
    q3 = property(lambda self: quantile(self._sorted, 0.75))
    iqr = property(lambda self: self.q3 - self.q1)
    rounds = property(lambda self: len(self.data))
    total = property(lambda self: math.fsum(self.data))
    ops = property(lambda self: 1 / self.mean if self.mean > 0 else 0.0)

    @property
    def stddev(self) -> float:
        return float_stdev(self.data)

    @property
    def ld15iqr(self) -> float:
        """The lowest sample within 1.5 IQR below the first quartile (Tukey)."""
        return next(v for v in self._sorted if v >= self.q1 - 1.5 * self.iqr)

    @property
    def hd15iqr(self) -> float:
        """The highest sample within 1.5 IQR above the third quartile (Tukey)."""
        return next(v for v in reversed(self._sorted) if v <= self.q3 + 1.5 * self.iqr)

    @property
    def iqr_outliers(self) -> int:
        low, high = self.q1 - 1.5 * self.iqr, self.q3 + 1.5 * self.iqr
        return sum(not low <= v <= high for v in self.data)

    @property
    def stddev_outliers(self) -> int:
        low, high = self.mean - self.stddev, self.mean + self.stddev
        return sum(not low <= v <= high for v in self.data)

    @property
    def outliers(self) -> str:
        return f"{self.stddev_outliers};{self.iqr_outliers}"
