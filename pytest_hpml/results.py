"""Plain data: metrics and records, JSON-serializable, SI base units inside."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Better = Literal["lower", "higher"] | None
VERDICTS = ("improved", "unchanged", "regressed", "ambiguous", "new", "missing")


@dataclass
class Metric:
    """One measured quantity. `value` is in SI base units (s, B, B/s, FLOP/s)."""

    name: str
    value: float
    unit: str = ""
    better: Better = None
    samples: list[float] | None = None
    tolerance: float | None = None
    note: str | None = None
    # Filled by a comparison with a baseline; absent otherwise.
    baseline: float | None = None
    change: float | None = None
    verdict: str | None = None
    p_value: float | None = None
    # Spread of the samples, for printing "median ± IQR".
    iqr: float | None = None

    def __post_init__(self) -> None:
        if self.better not in ("lower", "higher", None):
            raise ValueError(
                f"metric {self.name!r}: better must be 'lower', 'higher' or None, "
                f"not {self.better!r}"
            )
        if self.tolerance is not None and not (self.tolerance >= 0):
            raise ValueError(f"metric {self.name!r}: tolerance must be >= 0, got {self.tolerance}")
        self.value = _plain_number(self.value)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metric:
        return cls(**data)


@dataclass
class Record:
    """One row of an experiment: the parameters that identify it and its metrics."""

    id: str  # stable key in baselines: the test's nodeid, plus row columns for extra rows
    experiment: str  # table title; rows with the same experiment share a table
    params: dict[str, Any] = field(default_factory=dict)
    metrics: list[Metric] = field(default_factory=list)
    order: list[Any] = field(default_factory=list)  # sort key stable across xdist workers
    device: str = "cpu"
    warnings: list[str] = field(default_factory=list)
    views: dict[str, Any] = field(default_factory=dict)  # pivot / plot specs from markers

    def metric(self, name: str) -> Metric | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    def add(self, metric: Metric) -> Metric:
        # Re-recording a name replaces it: the last measurement of a test wins.
        self.metrics = [m for m in self.metrics if m.name != metric.name]
        self.metrics.append(metric)
        return metric

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "experiment": self.experiment,
            "params": {k: _plain(v) for k, v in self.params.items()},
            "metrics": [m.to_dict() for m in self.metrics],
            "order": self.order,
            "device": self.device,
            "warnings": list(self.warnings),
            "views": self.views,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Record:
        return cls(
            id=data["id"],
            experiment=data["experiment"],
            params=dict(data.get("params", {})),
            metrics=[Metric.from_dict(m) for m in data.get("metrics", [])],
            order=list(data.get("order", [])),
            device=data.get("device", "cpu"),
            warnings=list(data.get("warnings", [])),
            views=dict(data.get("views", {})),
        )


def _plain_number(value: Any) -> float:
    """Accept python numbers, numpy scalars and 0-d tensors; keep the record JSON-safe."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        raise TypeError(f"a metric value must be a number, got {type(value).__name__}")
    return float(value)


def _plain(value: Any) -> Any:
    """Parameter values as JSON-friendly scalars (dtypes, devices and the like as strings)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return value.item()
    text = str(value)
    return text.removeprefix("torch.")
