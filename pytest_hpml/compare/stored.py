"""What a baseline holds of a measured metric: its latest run (value and samples), the values of
its last runs oldest first with how many each save added (its history, by occasion), the levels
saves accepted, and where a value another tool measured came from. A value of the compare stage:
the store (baselines.py) reads and writes it, a save (history.py) extends it, and a comparison
weighs a run against it (verdicts.py). Evidence measured now (processes at a git ref, a second
report) takes the same form, as one occasion."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, replace
from typing import Any

from pytest_hpml.compare.provenance import occasions_in_time
from pytest_hpml.measure.stats import deciles, median_uncertainty
from pytest_hpml.results import Accepted, Better, Metric, Replicates, check_measurement


@dataclass
class Stored:
    """A measured metric as evidence holds it (SI base units, or the unit it was saved in)."""

    name: str
    value: float  # the latest run's
    unit: str = ""
    better: Better = None
    exact: bool = False
    tolerance: float | None = None
    derived_from: str | None = None
    # The latest run's samples (files written before 0.3, and evidence measured now), or what
    # a verdict needs of them: how many there were and the notch of their median (its
    # relative ~95 % half-width), so that a baseline holds no sample a verdict does not use.
    samples: list[float] | None = None
    iqr: float | None = None
    yardstick: float | None = None  # the latest run's
    compute_yardstick: float | None = None  # the latest run's compute pace (Metric's)
    n: int | None = None
    notch: float | None = None
    # The latest run's 10th and 90th percentiles: the levels of its fast and slow calls, which
    # a median that moved with the share of slow calls leaves where they were
    # (compare/machine_moves.py).
    p10: float | None = None
    p90: float | None = None
    # The values of the last runs, oldest first, as measured and relative to each run's
    # yardstick (the tail of the runs as measured that timed it); how many values each save
    # added, oldest first (each save is one occasion: the drift between them is learned).
    history: list[float] | None = None
    relative_history: list[float] | None = None
    # And relative to each run's compute pace (compute_yardstick), the same way.
    paced_history: list[float] | None = None
    history_saves: list[int] | None = None
    # The id of the save behind each entry of history_saves (compare/provenance.py; None where
    # a file written before saves had ids does not know it).
    history_save_ids: list[str | None] | None = None
    # The changes saves accepted, oldest first: {"on": ISO date, "before", "after", "save"}.
    accepted: list[dict[str, Any]] | None = None
    # Where a value came from when another tool measured it (a pytest-benchmark run seeded
    # with `python -m pytest_hpml seed`): its between-run spread is unknown, and the first save
    # of pytest-hpml's own runs replaces it.
    seeded_from: str | None = None

    def __post_init__(self) -> None:
        # The rules of a measurement (a name, a direction, no negative time) are Metric's own:
        # a stored metric is one hpml.record would have accepted.
        check_measurement(self.name, self.value, self.unit, self.better,
                          samples=self.samples, tolerance=self.tolerance)

    @property
    def relative(self) -> float | None:
        """The latest value relative to its run's yardstick (as Metric.relative)."""
        if not self.yardstick or self.better is None or not math.isfinite(self.value):
            return None
        return self.value / self.yardstick if self.better == "lower" else \
            self.value * self.yardstick

    @property
    def within(self) -> float:
        """The latest run's notch: the relative uncertainty of its median."""
        if self.notch is not None:
            return self.notch
        return median_uncertainty(self.samples or [])

    @property
    def deciles(self) -> tuple[float, float] | None:
        """The latest run's 10th and 90th percentiles (None where too few samples were
        taken)."""
        if self.p10 is not None and self.p90 is not None:
            return self.p10, self.p90
        return deciles(self.samples or [])

    @property
    def runs(self) -> list[float]:
        """The stored runs' values (the latest value alone where no history was kept)."""
        return list(self.history) if self.history else [self.value]

    @property
    def saves_together(self) -> list[int] | None:
        """How many consecutive saves of history_saves each occasion holds, oldest first
        (saves made within the hour are one occasion: provenance.occasions_in_time); None
        where each save is an occasion of its own, or their times are unknown."""
        if not self.history or not self.history_saves:
            return None
        return occasions_in_time(self.history_save_ids)

    @property
    def reference(self) -> float:
        """The value a change is measured from: the median of the stored runs' finite values
        (the latest value where there is none)."""
        finite = [v for v in self.runs if math.isfinite(v)]
        return statistics.median(finite) if finite else self.value

    def last_accepted(self) -> Accepted | None:
        if not self.accepted:
            return None
        last = self.accepted[-1]
        return Accepted(str(last.get("on", "")), float(last["before"]), float(last["after"]))

    def scaled(self, factor: float, unit: str) -> Stored:
        """The same evidence in another unit (`factor` times each value): a latency saved in
        ms is compared in s. Relative values scale with it; a time over the yardstick is
        still a time, a rate times it still a rate."""
        def times(values: list[float] | None) -> list[float] | None:
            return None if values is None else [v * factor for v in values]

        accepted = None if self.accepted is None else [
            {**a, "before": a["before"] * factor, "after": a["after"] * factor}
            for a in self.accepted]
        return replace(self, value=self.value * factor, unit=unit, samples=times(self.samples),
                       p10=None if self.p10 is None else self.p10 * factor,
                       p90=None if self.p90 is None else self.p90 * factor,
                       iqr=None if self.iqr is None else self.iqr * factor,
                       history=times(self.history), relative_history=times(
                           self.relative_history), paced_history=times(self.paced_history),
                       accepted=accepted)

    def to_dict(self) -> dict[str, Any]:
        # Shallow: the lists are the stored metric's own and written as they are (asdict's
        # deep copy took 2 s of a 10 000-row save).
        # Its fields by name (dataclasses.fields builds its tuple anew on every call: twice a
        # row of a 10 000-row file read and saved).
        known = self.__dataclass_fields__
        data = {k: v for k, v in self.__dict__.items() if v is not None and k in known}
        if not data.get("exact"):
            data.pop("exact", None)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Stored:
        known = cls.__dataclass_fields__
        return cls(**{k: v for k, v in data.items() if k in known})

    @classmethod
    def measured_now(cls, metrics: list[Metric]) -> Stored:
        """Evidence measured now, in several processes of one occasion (processes at a git ref,
        a second report's processes): the first process's metric, every process's value as its
        history, relative to the yardstick where every process timed it."""
        first = metrics[0]
        values = [m.value for m in metrics]
        relative = [m.relative for m in metrics]
        paced = [m.paced for m in metrics]
        return cls(first.name, first.value, first.unit, first.better, first.exact,
                   first.tolerance, first.derived_from, first.samples, first.iqr,
                   first.yardstick, compute_yardstick=first.compute_yardstick,
                   history=values, history_saves=[len(values)],
                   relative_history=None if None in relative else relative,  # type: ignore
                   paced_history=None if None in paced else paced)  # type: ignore

    @classmethod
    def of_report(cls, metric: Metric, values: Replicates) -> Stored:
        """A report's metric as evidence: the values of its processes as one occasion."""
        relative = list(values.relative) if values.relative is not None else None
        paced = list(values.paced) if values.paced is not None else None
        return cls(metric.name, metric.value, metric.unit, metric.better, metric.exact,
                   metric.tolerance, metric.derived_from, metric.samples, metric.iqr,
                   metric.yardstick, compute_yardstick=metric.compute_yardstick,
                   history=list(values.values) or None,
                   history_saves=[len(values.values)] if values.values else None,
                   relative_history=relative, paced_history=paced)
