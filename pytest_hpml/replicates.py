"""A metric's values from every process of a run that measured it: plain data beside the
Metric (pytest_hpml.results), made in one place (pytest_hpml.compare.engine.merge)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


def number_or_nan(value: Any) -> float:
    """A process value as JSON carries it: standard JSON writes NaN and infinities as null."""
    return math.nan if value is None else float(value)


def _series(data: dict[str, Any], key: str, n: int) -> tuple[float, ...] | None:
    found = data.get(key)
    return tuple(number_or_nan(v) for v in found) \
        if isinstance(found, list) and len(found) == n else None


@dataclass(frozen=True)
class Replicates:
    """A metric's values from every process of this run that measured it, the test's own
    first: as measured, relative to each process's yardstick, and relative to each process's
    compute pace (each None unless every process timed it). What a verdict, a save and an
    export rest on."""

    values: tuple[float, ...]
    relative: tuple[float, ...] | None = None
    paced: tuple[float, ...] | None = None

    @property
    def value(self) -> float:
        """The median of the finite values (NaN where there is none)."""
        finite = sorted(v for v in self.values if math.isfinite(v))
        if not finite:
            return self.values[0] if self.values else math.nan
        mid = len(finite) // 2
        return finite[mid] if len(finite) % 2 else (finite[mid - 1] + finite[mid]) / 2

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"values": list(self.values)}
        if self.relative is not None:
            data["relative"] = list(self.relative)
        if self.paced is not None:
            data["paced"] = list(self.paced)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Replicates:
        values = tuple(number_or_nan(v) for v in data["values"])
        return cls(values, _series(data, "relative", len(values)),
                   _series(data, "paced", len(values)))
