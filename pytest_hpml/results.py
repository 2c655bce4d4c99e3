"""Plain data: metrics and records, JSON-serializable, SI base units inside.

A metric says what kind of number it is, and each part of the plugin acts on the kind:

    measured   a figure this run obtained; stored in baselines, exported, given verdicts
    check      a correctness error held to a limit; the test fails when it is out of bounds
    reference  a published figure (paper, datasheet), shown beside measurements with its source;
               never stored in baselines nor exported
    setting    a constant of the experiment (a batch size, a ceiling it divides by); shown only
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Better = Literal["lower", "higher"] | None
Kind = Literal["measured", "check", "reference", "setting"]
KINDS: tuple[str, ...] = ("measured", "check", "reference", "setting")
VERDICTS = ("improved", "unchanged", "regressed", "ambiguous", "new", "missing", "suspect")


@dataclass(frozen=True)
class Verdict:
    """How a measured metric compares with the stored baseline, and what that rests on; made by
    a comparison (pytest_hpml.compare.verdicts) and kept beside the measurement."""

    outcome: str  # one of VERDICTS
    baseline: float | None = None  # the stored value the change is measured from
    change: float | None = None  # relative change from `baseline`
    mdc: float | None = None  # the smallest relative change this machine can detect
    basis: str | None = None  # what the verdict rests on, in words
    # The change is relative to the machine's yardstick, not as measured.
    relative: bool = False
    p_value: float | None = None  # of the rank test, where one was run
    # The stored level's last accepted change, in words: "accepted on DATE: before -> after".
    accepted: str | None = None
    # A blind spot: the detectable change exceeds --hpml-max-detectable; what it cannot see
    # and what would narrow it, in words.
    blind: str | None = None

    def __post_init__(self) -> None:
        if self.outcome not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, not {self.outcome!r}")

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None and v is not False}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Verdict:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class Metric:
    """One quantity of a row. `value` is in SI base units (s, B, B/s, FLOP/s)."""

    name: str
    value: float
    unit: str = ""
    better: Better = None
    kind: Kind = "measured"
    samples: list[float] | None = None
    tolerance: float | None = None  # measured: relative change still counted as unchanged
    limit: float | None = None  # check: the bound the value must respect
    source: str | None = None  # reference: where the figure was published
    note: str | None = None
    # An exact figure (a count, a compile-time resource, a yes/no finding) is the same in every
    # run of the same code: any change beyond its tolerance (0 unless given) is a change, judged
    # without a noise model and never measured again.
    exact: bool = False
    # Derived metrics (a bandwidth from a time) are judged with the evidence of their timing.
    derived_from: str | None = None
    # Seconds of the machine's yardstick timed alongside (CPU timings and what derives from
    # them): comparisons may judge the value relative to it (pytest_hpml.measure.yardstick).
    yardstick: float | None = None
    # The metric's values from further fresh processes of this run (a save's extra processes,
    # a comparison's confirmation runs), beside `value` from the test's own process; as
    # measured, and relative to each process's yardstick.
    runs: list[float] | None = None
    relative_runs: list[float] | None = None
    # Baselines only: the values of the last runs, oldest first; as measured, and relative
    # (the tail of the runs as measured that timed the yardstick); how many values each save
    # added, oldest first (each save is one occasion: the drift between them is learned);
    # and the changes a save accepted, oldest first: {"on": ISO date, "before", "after"}.
    history: list[float] | None = None
    relative_history: list[float] | None = None
    history_saves: list[int] | None = None
    accepted: list[dict[str, Any]] | None = None
    # Baselines only: where a value came from when another tool measured it (a pytest-benchmark
    # run seeded with `python -m pytest_hpml seed`): its between-run spread is unknown, and the
    # first save of pytest-hpml's own runs replaces it.
    seeded_from: str | None = None
    # Made by a comparison with a baseline; absent otherwise.
    verdict: Verdict | None = None
    # Spread of the samples, for printing "median ± IQR".
    iqr: float | None = None

    def __post_init__(self) -> None:
        # These rules are also the baseline loader's (it builds every stored metric through
        # here): a metric hpml.record accepts is one a saved baseline can be read back with.
        __tracebackhide__ = True  # pytest shows the test's line and the message, not this code
        check_name(self.name)
        if self.better not in ("lower", "higher", None):
            raise ValueError(
                f"metric {self.name!r}: better must be 'lower', 'higher' or None, "
                f"not {self.better!r}"
            )
        if self.kind not in KINDS:
            raise ValueError(f"metric {self.name!r}: kind must be one of {KINDS}, "
                             f"not {self.kind!r}")
        if self.kind == "reference" and not self.source:
            raise ValueError(f"metric {self.name!r}: a reference figure needs its source "
                             "(source='Coleman et al. 2019, Table 3a')")
        if self.tolerance is not None and not (self.tolerance >= 0):
            raise ValueError(f"metric {self.name!r}: tolerance must be >= 0, got {self.tolerance}")
        self.value = _plain_number(self.value, self.name)
        if self.samples is not None:
            self.samples = [_plain_number(v, self.name) for v in self.samples]
            for i, v in enumerate(self.samples):
                if not math.isfinite(v):
                    # One broken sample would poison every statistic of the metric.
                    raise ValueError(f"metric {self.name!r}: sample {i} is {v}; samples must "
                                     "be finite numbers")
        if self.kind == "measured" and self.unit == "s":
            negative = [v for v in [self.value, *(self.samples or [])] if v < 0]
            if negative:
                raise ValueError(
                    f"metric {self.name!r}: a time of {negative[0]!r} s is negative; a "
                    "measured time is never below 0 (record a difference that can be negative "
                    "without unit='s', or clamp it at 0)")

    @property
    def relative(self) -> float | None:
        """The value relative to the machine's yardstick (a time over it, a rate times it);
        None without a yardstick or a direction."""
        if not self.yardstick or self.better is None or not math.isfinite(self.value):
            return None
        return self.value / self.yardstick if self.better == "lower" else \
            self.value * self.yardstick

    @property
    def compared(self) -> bool:
        """Whether baselines keep this metric and comparisons give it a verdict."""
        return self.kind == "measured"

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in asdict(self).items() if v is not None}
        if self.verdict is not None:
            data["verdict"] = self.verdict.to_dict()
        if not data.get("exact"):
            data.pop("exact", None)  # the default: keeps files small and old files readable
        if data.get("kind") == "measured":
            del data["kind"]  # the default: keeps files small and old files readable
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metric:
        known = cls.__dataclass_fields__
        fields = {k: v for k, v in data.items() if k in known}
        verdict = fields.pop("verdict", None)
        if isinstance(verdict, dict):  # reports of pytest-hpml 0.2 held a word: not read
            fields["verdict"] = Verdict.from_dict(verdict)
        return cls(**fields)


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
    # Baseline metrics this row may lack without failing a comparison ("*": any).
    expected_missing: list[str] = field(default_factory=list)
    # The node id of the test that made the row ("" for rows of other origins): a row the
    # baseline has and the test no longer makes is missing.
    test: str = ""

    def metric(self, name: str) -> Metric | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    def add(self, metric: Metric) -> Metric:
        # Re-recording a name replaces it, and says so: the first value would otherwise be
        # lost without a word.
        before = self.metric(metric.name)
        if before is not None:
            self.warnings.append(f"{metric.name} recorded twice in this row: {metric.value:.6g} "
                                 f"replaced {before.value:.6g}")
            self.metrics.remove(before)
        self.metrics.append(metric)
        return metric

    def may_miss(self, name: str) -> bool:
        return "*" in self.expected_missing or name in self.expected_missing

    def to_dict(self) -> dict[str, Any]:
        data = {
            "id": self.id,
            "experiment": self.experiment,
            "params": {k: _plain(v) for k, v in self.params.items()},
            "metrics": [m.to_dict() for m in self.metrics],
            "order": self.order,
            "device": self.device,
            "warnings": list(self.warnings),
            "views": self.views,
        }
        if self.expected_missing:
            data["expected_missing"] = list(self.expected_missing)
        if self.test:
            data["test"] = self.test
        return data

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
            expected_missing=list(data.get("expected_missing", [])),
            test=str(data.get("test", "")),
        )


def measured_figures(record: Record) -> tuple[list[Metric], list[Metric]]:
    """A record's measured metrics that baselines and dashboards can take (finite numbers),
    and the measured ones that are not numbers (NaN, inf): left out, and said so."""
    kept, not_numbers = [], []
    for m in record.metrics:
        if not m.compared or (m.verdict and m.verdict.outcome == "missing"):
            continue  # checks, references, settings; and rows of a comparison, not values
        (kept if math.isfinite(m.value) else not_numbers).append(m)
    return kept, not_numbers


def check_name(name: Any) -> None:
    """A metric is named by a non-empty string (a baseline keys its metrics by name)."""
    __tracebackhide__ = True
    if not isinstance(name, str) or not name:
        raise TypeError(f"metric name {name!r}: a metric is named by a non-empty string, e.g. "
                        "hpml.record('time', ...)")


def _plain_number(value: Any, name: str = "") -> float:
    """Accept python numbers, numpy scalars and 0-d tensors; keep the record JSON-safe."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        what = f"metric {name!r}: " if name else ""
        raise TypeError(f"{what}a metric value must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"metric {name!r}: {value} does not fit a float64") from None


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


def json_safe(obj: Any) -> Any:
    """`obj` with every non-finite float as None: standard JSON (JSON.parse, which dashboard
    actions use, rejects the NaN and Infinity that Python's json writes by default)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    return obj
