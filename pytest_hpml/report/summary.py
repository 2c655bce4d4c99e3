"""The short table printed at the end of every run that timed something (as pytest-benchmark
prints one by default): one row per timing, its median ± IQR in a unit chosen for that row,
min, max and the samples it rests on. The full report (every metric, one table per
experiment) stays --hpml-report's."""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from pytest_hpml.measure.stats import float_stdev
from pytest_hpml.report.tables import Table, in_report_order
from pytest_hpml.report.units import format_value
from pytest_hpml.results import Metric, Record

TITLE = "hpml summary"
#: Under the summary (the last of its tables).
NOTES = ["--hpml-report: every metric, one table per experiment; "
         "--hpml-no-timings-table: no summary"]
#: --benchmark-sort's columns, as the summary orders its rows by them.
SORT_KEYS = ("min", "max", "mean", "stddev", "name", "fullname")


def _timings(records: list[Record]) -> list[tuple[Record, Metric]]:
    return [(r, m) for r in in_report_order(records) for m in r.metrics
            if m.kind == "measured" and m.unit == "s"]


def _statistic(metric: Metric, key: str) -> float:
    samples = metric.samples or [metric.value]
    if key == "min":
        return min(samples)
    if key == "max":
        return max(samples)
    if key == "mean":
        return statistics.fmean(samples)
    return float_stdev(samples)


def _range(metric: Metric) -> list[str]:
    """min, max and the count of the samples (blank where the row kept none)."""
    if not metric.samples:
        return ["", "", ""]
    return [format_value(min(metric.samples), "s"), format_value(max(metric.samples), "s"),
            str(len(metric.samples))]


def summary_table(records: list[Record], sort: str | None = None) -> Table | None:
    """The run's timings, one row each, in report order or sorted by `sort` (one of
    SORT_KEYS); None where the run timed nothing."""
    timed = _timings(records)
    if not timed:
        return None
    if sort in ("name", "fullname"):
        timed.sort(key=lambda rm: rm[0].id.split("::")[-1] if sort == "name" else rm[0].id)
    elif sort is not None:
        timed.sort(key=lambda rm: _statistic(rm[1], sort))
    several = len({m.name for _, m in timed}) > 1
    rows = []
    for record, metric in timed:
        spread = metric.iqr if metric.iqr and math.isfinite(metric.iqr) else None
        test = record.id if not several else f"{record.id} {metric.name}"
        rows.append([test, format_value(record.values_of(metric.name).value, "s", spread),
                     *_range(metric)])
    return Table(TITLE, ["test", "median ± IQR", "min", "max", "samples"], rows, list(NOTES))


def summary_tables(records: list[Record], sort: str | None = None) -> list[Table]:
    """The summary split as pytest-benchmark splits its table: one table per group of
    `benchmark` rows (their experiment, "benchmark 'GROUP'", follows --benchmark-group-by),
    one for every other timing; the notes under the last table only."""
    parts: dict[str, list[Record]] = {}
    for record in in_report_order(records):
        group = record.experiment if record.experiment.startswith("benchmark ") else ""
        parts.setdefault(group, []).append(record)
    tables = [replace(table, title=f"{TITLE}: {group}" if group else TITLE, notes=[])
              for group, part in parts.items()
              if (table := summary_table(part, sort)) is not None]
    if tables:
        tables[-1].notes = list(NOTES)
    return tables


def summary_line(records: list[Record]) -> str | None:
    """-q: the summary in one line; None where the run timed nothing."""
    timed = _timings(records)
    if not timed:
        return None
    tests = len({r.id for r, _ in timed})
    return (f"{len(timed)} timing(s) of {tests} test(s); the table: run without -q, or "
            "--hpml-report")
