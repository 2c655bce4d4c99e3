"""Plain data: metrics and records, JSON-serializable, SI base units inside.

A metric says what kind of number it is, and each part of the plugin acts on the kind:

    measured   a figure this run obtained; stored in baselines, exported, given verdicts
    check      a correctness error held to a limit; the test fails when it is out of bounds
    reference  a published figure (paper, datasheet), shown beside measurements with its source;
               never stored in baselines nor exported
    setting    a constant of the experiment (a batch size, a ceiling it divides by); shown only

A Metric is what one process measured. Beside it, a Record keeps what later stages made of it:
the values of further fresh processes (Replicates) and the verdict of a comparison (Verdict).
What a baseline stores of a metric is the compare stage's own value (compare/stored.py).
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pytest_hpml.plain_numbers import plain_number as _plain_number
from pytest_hpml.replicates import Replicates
from pytest_hpml.verdict import VERDICTS as VERDICTS
from pytest_hpml.verdict import Accepted as Accepted
from pytest_hpml.verdict import Verdict

Better = Literal["lower", "higher"] | None
Kind = Literal["measured", "check", "reference", "setting"]
KINDS: tuple[str, ...] = ("measured", "check", "reference", "setting")


def check_measurement(name: str, value: Any, unit: str = "", better: Better = None,
                      kind: str = "measured", samples: Any = None, tolerance: Any = None,
                      source: str | None = None) -> tuple[float, list[float] | None]:
    """A metric's rules: Metric's, and the baseline loader's (a stored metric is checked by
    them without building a Metric): a metric hpml.record accepts is one a saved baseline can
    be read back with. Returns the value and the samples as plain floats."""
    __tracebackhide__ = True  # pytest shows the test's line and the message, not this code
    check_name(name)
    if better not in ("lower", "higher", None):
        raise ValueError(f"metric {name!r}: better must be 'lower', 'higher' or None, "
                         f"not {better!r}")
    if kind not in KINDS:
        raise ValueError(f"metric {name!r}: kind must be one of {KINDS}, not {kind!r}")
    if kind == "reference" and not source:
        raise ValueError(f"metric {name!r}: a reference figure needs its source "
                         "(source='Coleman et al. 2019, Table 3a')")
    if tolerance is not None and (isinstance(tolerance, (str, bool))
                                  or not isinstance(tolerance, numbers.Real)):
        raise TypeError(f"metric {name!r}: tolerance is a number such as 0.1 (10 %), "
                        f"got {tolerance!r} ({type(tolerance).__name__})")
    if tolerance is not None and not (tolerance >= 0):
        raise ValueError(f"metric {name!r}: tolerance must be >= 0, got {tolerance}")
    value = _plain_number(value, name)
    if samples is not None:
        # A timing's samples are floats already (10k of them for a 10 us call, in every
        # process): only other numbers go through the conversion one by one.
        samples = list(samples)
        if not all(type(v) is float for v in samples):
            samples = [_plain_number(v, name) for v in samples]
        try:
            total = math.fsum(samples)  # every statistic of the samples sums them
        except OverflowError:
            if all(map(math.isfinite, samples)):
                raise ValueError(f"metric {name!r}: samples near {max(samples):g} "
                                 "overflow a float64 sum; record them in a larger unit"
                                 ) from None
            total = math.nan
        except ValueError:  # inf and -inf among them
            total = math.nan
        if not math.isfinite(total):
            # One broken sample would poison every statistic of the metric.
            i, v = next((i, v) for i, v in enumerate(samples) if not math.isfinite(v))
            raise ValueError(f"metric {name!r}: sample {i} is {v}; samples must "
                             "be finite numbers")
    if kind == "measured" and unit == "s":
        negative = [v for v in [value, *(samples or [])] if v < 0]
        if negative:
            raise ValueError(
                f"metric {name!r}: a time of {negative[0]!r} s is negative; a "
                "measured time is never below 0 (record a difference that can be negative "
                "without unit='s', or clamp it at 0)")
    return value, samples


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
    # The machine's compute pace during the timing (seconds of the yardstick's loop), and
    # whether the samples moved with it: a verdict the pace explains is held back, and a time
    # is judged relative to it where the history shows it tracks (`paced`).
    compute_yardstick: float | None = None
    pace_tracked: bool | None = None
    # Spread of the samples, for printing "median ± IQR".
    iqr: float | None = None

    def __post_init__(self) -> None:
        __tracebackhide__ = True  # pytest shows the test's line and the message, not this code
        self.value, self.samples = check_measurement(
            self.name, self.value, self.unit, self.better, self.kind, self.samples,
            self.tolerance, self.source)

    @property
    def relative(self) -> float | None:
        """The value relative to the machine's yardstick (a time over it, a rate times it);
        None without a yardstick or a direction."""
        if not self.yardstick or self.better is None or not math.isfinite(self.value):
            return None
        return self.value / self.yardstick if self.better == "lower" else \
            self.value * self.yardstick

    @property
    def paced(self) -> float | None:
        """A time relative to the machine's compute pace during it (compute_yardstick); None
        for anything else or without one."""
        pace = self.compute_yardstick
        if self.unit != "s" or not pace or pace <= 0 or not math.isfinite(self.value):
            return None
        return self.value / pace

    @property
    def compared(self) -> bool:
        """Whether baselines keep this metric and comparisons give it a verdict."""
        return self.kind == "measured"

    def to_dict(self) -> dict[str, Any]:
        # Every field is a plain value or a list of floats: a shallow copy, where asdict's
        # deep copy of each sample took 0.06 s per 10k samples.
        data = {f: getattr(self, f) for f in self.__dataclass_fields__}
        data = {k: list(v) if isinstance(v, list) else v for k, v in data.items()
                if v is not None}
        if not data.get("exact"):
            data.pop("exact", None)  # the default: keeps files small and old files readable
        if data.get("kind") == "measured":
            del data["kind"]  # the default: keeps files small and old files readable
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Metric:
        """A metric from its JSON form; what a report or a baseline holds beside the
        measurement (a verdict, the values of other processes, a history) is not read here."""
        known = cls.__dataclass_fields__
        fields = {k: v for k, v in data.items() if k in known}
        if "value" in fields and fields["value"] is None:
            # Standard JSON holds a measured NaN or infinity as null (json_safe).
            fields["value"] = math.nan
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
    # Beside the measurements: the values of every process of this run that measured a metric
    # (where fresh processes measured it again), and the verdict of each metric judged against
    # evidence, by name (a metric of the evidence that this row lacks has a verdict and no
    # metric: `missing`).
    replicates: dict[str, Replicates] = field(default_factory=dict)
    verdicts: dict[str, Verdict] = field(default_factory=dict)

    def metric(self, name: str) -> Metric | None:
        for m in self.metrics:
            if m.name == name:
                return m
        return None

    @cached_property
    def table_key(self) -> list[tuple[int, Any]]:
        """`order` as the tables sort rows by it: numbers before words at each place, so that
        mixed keys never fail to compare. Made once a row (a run's end sorted a 10 000-row
        sweep's rows three times, making each row's key each time); `order` is set once."""
        return [(0, v) if isinstance(v, (int, float)) else (1, str(v)) for v in self.order]

    def values_of(self, name: str) -> Replicates:
        """The values of the metric `name` from every process that measured it (the test's own
        alone where no fresh process did)."""
        if name in self.replicates:
            return self.replicates[name]
        m = self.metric(name)
        if m is None:
            return Replicates(())
        return Replicates((m.value,), (m.relative,) if m.relative is not None else None,
                          (m.paced,) if m.paced is not None else None)

    def verdict(self, name: str) -> Verdict | None:
        return self.verdicts.get(name)

    def outcome(self, name: str) -> str | None:
        """The verdict of the metric `name` in one word, None where it has none."""
        v = self.verdicts.get(name)
        return v.outcome if v else None

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

    def identity(self, metrics: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The row with `metrics` (none given: an empty list) and without what a comparison
        made of it: what a baseline stores of a row, the metrics it merges put in (a 10 000-row
        save built every metric's and verdict's dict only to drop them)."""
        data = {
            "id": self.id,
            "experiment": self.experiment,
            "params": {k: _plain(v) for k, v in self.params.items()},
            "metrics": [] if metrics is None else metrics,
            "order": self.order,
            "device": self.device,
            "warnings": list(self.warnings),
            "views": self.views,
        }
        if self.test:
            data["test"] = self.test
        return data

    def to_dict(self) -> dict[str, Any]:
        data = self.identity([m.to_dict() for m in self.metrics])
        if self.expected_missing:
            data["expected_missing"] = list(self.expected_missing)
        if self.replicates:
            data["replicates"] = {k: r.to_dict() for k, r in self.replicates.items()}
        if self.verdicts:
            data["verdicts"] = {k: v.to_dict() for k, v in self.verdicts.items()}
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
            replicates={k: Replicates.from_dict(r)
                        for k, r in (data.get("replicates") or {}).items()},
            verdicts={k: Verdict.from_dict(v) for k, v in (data.get("verdicts") or {}).items()},
        ) if "verdicts" in data or not _holds_old_verdicts(data) else _from_old(data)


def _holds_old_verdicts(data: dict[str, Any]) -> bool:
    """A record of a report of pytest-hpml 0.2, whose metrics held their verdicts and the
    values of fresh processes as fields of their own."""
    return any(isinstance(m, dict) and ("verdict" in m or "runs" in m)
               for m in data.get("metrics", []))


def _from_old(data: dict[str, Any]) -> Record:
    """A record of a 0.2 report: the verdicts and process values moved beside the metrics; a
    missing metric (a NaN placeholder) becomes a verdict alone."""
    metrics = [m for m in data.get("metrics", []) if isinstance(m, dict)]
    new = {**data, "metrics": [], "verdicts": {}, "replicates": {}}
    for m in metrics:
        verdict = m.get("verdict")
        if isinstance(verdict, dict):
            new["verdicts"][m["name"]] = {**verdict, "unit": m.get("unit", "")}
            if verdict.get("outcome") == "missing":
                continue
        runs = m.get("runs")
        if isinstance(runs, list) and runs:
            relative = m.get("relative_runs")
            own = Metric.from_dict(m)
            new["replicates"][m["name"]] = {
                "values": [m["value"], *runs],
                **({"relative": [own.relative, *relative]} if own.relative is not None and
                   isinstance(relative, list) and len(relative) == len(runs) else {})}
        new["metrics"].append(m)
    return Record.from_dict(new)


def measured_figures(record: Record) -> tuple[list[Metric], list[Metric]]:
    """A record's measured metrics that baselines and dashboards can take (finite numbers),
    and the measured ones that are not numbers (NaN, inf): left out, and said so."""
    kept, not_numbers = [], []
    for m in record.metrics:
        if not m.compared:
            continue  # checks, references, settings
        (kept if math.isfinite(m.value) else not_numbers).append(m)
    return kept, not_numbers


def check_name(name: Any) -> None:
    """A metric is named by a non-empty string (a baseline keys its metrics by name)."""
    __tracebackhide__ = True
    if not isinstance(name, str) or not name:
        raise TypeError(f"metric name {name!r}: a metric is named by a non-empty string, e.g. "
                        "hpml.record('time', ...)")


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

