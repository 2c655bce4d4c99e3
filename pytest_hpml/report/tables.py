"""Tables from records: one per experiment, pivots where a test asks, and baseline comparisons."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from pytest_hpml.report.escaping import for_markdown, for_terminal
from pytest_hpml.report.lines import capped
from pytest_hpml.report.units import (
    format_detectable,
    format_number,
    format_scaled,
    format_value,
    scale_for,
)
from pytest_hpml.results import Metric, Record, Verdict


@dataclass
class Table:
    title: str
    headers: list[str]
    rows: list[list[Any]]
    notes: list[str] = field(default_factory=list)


def group_by_experiment(records: Iterable[Record]) -> dict[str, list[Record]]:
    groups: dict[str, list[Record]] = {}
    for record in sorted(records, key=_table_key):
        groups.setdefault(record.experiment, []).append(record)
    return groups


def in_report_order(records: Iterable[Record]) -> list[Record]:
    """Experiments in the order of their first row, rows in collection order.

    The same order with or without xdist, whose workers finish tests in any order.
    """
    return [r for group in group_by_experiment(records).values() for r in group]


def _table_key(record: Record) -> list[tuple[int, Any]]:
    return record.table_key


def _unique(values: Iterable[Any]) -> list[Any]:
    seen: dict[Any, None] = {}
    for v in values:
        seen.setdefault(v, None)
    return list(seen)


def _column_scale(unit: str, values: list[float]) -> tuple[float, str]:
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    return scale_for(unit, statistics.median(finite)) if finite else (1.0, unit)


def _shared_scales(columns: list[tuple[str, list[float]]]) -> list[tuple[float, str]]:
    """Each column's (factor, printed unit), for columns given as (unit, values). Columns of
    one unit share one scale where one suits every one of them (algbw and busbw both in GB/s,
    not 0.75 GB/s beside 751 MB/s): the largest of the units the columns would choose alone
    under which each column's median still reads between 0.1 and 10,000; where none does (a
    kernel's microseconds beside a program's seconds) each keeps its own."""
    scales = [_column_scale(unit, values) for unit, values in columns]
    by_unit: dict[str, list[int]] = {}
    for i, (unit, _) in enumerate(columns):
        by_unit.setdefault(unit, []).append(i)
    for unit, indices in by_unit.items():
        # A column of zeros (no spill bytes) keeps its own unit: it has no size to share.
        indices = [i for i in indices if _median(columns[i][1]) is not None]
        if len(indices) < 2 or not unit:
            continue
        medians = [_median(columns[i][1]) for i in indices]
        fitting = [scales[i] for i in indices
                   if all(0.1 <= m / scales[i][0] < 1e4 for m in medians)]
        if fitting:
            joint = max(fitting, key=lambda scale: scale[0])
            for i in indices:
                scales[i] = joint
    return scales


def _median(values: list[float]) -> float | None:
    finite = [abs(v) for v in values if v is not None and math.isfinite(v) and v != 0]
    return statistics.median(finite) if finite else None


def _cell(record: Record, name: str, factor: float) -> str:
    """A metric's cell: the value its verdict and exports rest on (the median of the processes
    that measured it), and '± IQR' of the test's own samples only where they have a spread:
    one sample, or samples that all agree (five runs that all reached the target: 0 not
    reached), have none to show."""
    metric = record.metric(name)
    if metric is None:
        return ""
    spread = metric.iqr if metric.iqr and math.isfinite(metric.iqr) else None
    return format_scaled(record.values_of(name).value, metric.unit, factor, spread)


def _one_unit_reads(values: list[float], factor: float) -> bool:
    """Every value of a column reads between 0.1 and 10,000 in its shared unit."""
    return all(0.1 <= abs(v) / factor < 1e4 for v in values
               if v is not None and math.isfinite(v) and v != 0)


def _own_unit_cell(record: Record, name: str) -> str:
    """A cell in the unit its own value reads best in: '302.8 ± 11.06 ms'."""
    metric = record.metric(name)
    if metric is None:
        return ""
    spread = metric.iqr if metric.iqr and math.isfinite(metric.iqr) else None
    return format_value(record.values_of(name).value, metric.unit, spread)


def _param_cell(value: Any) -> Any:
    """A parameter as a user wrote it: None is None (tabulate would leave it blank)."""
    return "None" if value is None else value


def _header(name: str, unit: str) -> str:
    return f"{name} [{unit}]" if unit else name


def _metric_columns(records: list[Record], names: list[str] | None = None) -> list[tuple[str, str]]:
    found = _unique(m.name for r in records for m in r.metrics)
    if names:
        found = [n for n in names if n in found]
    units = {}
    for r in records:
        for m in r.metrics:
            units.setdefault(m.name, m.unit)
    return [(n, units[n]) for n in found]


def _shared_params(records: list[Record], params: list[str]) -> list[str]:
    """The parameters with one value in every row of a table of several rows (device=cpu,
    data=synthetic-CIFAR-10): said once in the title rather than repeated down a column."""
    if len(records) < 2:
        return []
    return [p for p in params
            if all(p in r.params for r in records)
            and len({repr(r.params[p]) for r in records}) == 1 and records[0].params[p] != ""]


def _said_in(title: str, value: Any) -> bool:
    """Whether a title already names the value ("... (cpu)" and device=cpu)."""
    return re.search(rf"(?<![\w.-]){re.escape(str(value))}(?![\w.-])", title) is not None


def wide_table(title: str, records: list[Record]) -> Table:
    params = _unique(k for r in records for k in r.params)
    shared = _shared_params(records, params)
    if shared:
        told = [p for p in shared if not _said_in(title, records[0].params[p])]
        if told:
            title += " (" + ", ".join(f"{p}={records[0].params[p]}" for p in told) + ")"
        params = [p for p in params if p not in shared]
    columns = _metric_columns(records)
    headers = list(params)
    values = [[r.metric(name).value for r in records if r.metric(name)] for name, _ in columns]
    scales = _shared_scales([(unit, v) for (_, unit), v in zip(columns, values, strict=True)])
    # A column whose values no one unit reads well in (0.3 us beside 0.3 s) gives each cell
    # its own unit rather than '3.028e+05 ± 11058 us'.
    per_row = [bool(unit) and not _one_unit_reads(v, f)
               for (_, unit), v, (f, _) in zip(columns, values, scales, strict=True)]
    for (name, _), (_, shown), own in zip(columns, scales, per_row, strict=True):
        headers.append(name if own else _header(name, shown))
    rows = []
    for r in records:
        row = [_param_cell(r.params[p]) if p in r.params else "" for p in params]
        row += [_own_unit_cell(r, name) if own else _cell(r, name, f)
                for (name, _), (f, _), own in zip(columns, scales, per_row, strict=True)]
        rows.append(row)
    return Table(title, headers, rows, notes=_notes(records))


def pivot_tables(title: str, records: list[Record], spec: dict[str, Any]) -> list[Table]:
    """Rows by `index` params, one column group per value of `columns`, split into tables."""
    index = spec.get("index") or []
    index = [index] if isinstance(index, str) else list(index)
    column = spec["columns"]
    split = spec.get("split")
    columns = _metric_columns(records, spec.get("metrics"))
    tables = []
    for part in _unique(r.params.get(split) for r in records) if split else [None]:
        subset = [r for r in records if split is None or r.params.get(split) == part]
        col_values = _unique(r.params.get(column) for r in subset)
        keys = _unique(tuple(r.params.get(i) for i in index) for r in subset)
        headers = list(index)
        groups: list[tuple[Any, str, str, list[float]]] = []
        for value in col_values:
            for name, unit in columns:
                vals = [r.metric(name).value for r in subset
                        if r.params.get(column) == value and r.metric(name)]
                if vals:
                    groups.append((value, name, unit, vals))
        cells: list[tuple[Any, str, float]] = []
        for (value, name, _, _), (factor, shown) in zip(
                groups, _shared_scales([(u, v) for _, _, u, v in groups]), strict=True):
            cells.append((value, name, factor))
            headers.append(f"{value} {_header(name, shown)}")
        rows = []
        for key in keys:
            row: list[Any] = list(key)
            for value, name, factor in cells:
                match = [r for r in subset if r.params.get(column) == value
                         and tuple(r.params.get(i) for i in index) == key]
                row.append(_cell(match[0], name, factor) if match else "")
            rows.append(row)
        suffix = f" ({split}={part})" if split else ""
        shown = {name for name, _ in columns}
        tables.append(Table(title + suffix, headers, rows,
                            notes=_settings_notes(subset, shown) + _notes(subset)))
    return tables


#: Marks a change measured relative to the machine's yardstick (pytest_hpml.measure.yardstick).
YARDSTICK_MARK = "†"
#: Opens the note of a blind spot: a detectable change beyond --hpml-max-detectable.
BLIND_MARK = "blind spot:"
_BLIND_KIND = BLIND_MARK.rstrip(":")


def _params(record: Record) -> str:
    return ", ".join(f"{k}={val}" for k, val in record.params.items())


def comparison_rows(records: list[Record]) -> list[list[str]]:
    """One row per judged metric: experiment, params, metric, baseline (the value the verdict
    measured the change from), current (the value the verdict rests on: the median of this
    run's processes), change, verdict, detectable."""
    return [comparison_row(r, name, v) for r in in_table_order(records)
            for name, v in r.verdicts.items()]


def in_table_order(records: list[Record]) -> list[Record]:
    """The rows in the order the comparison table lists them."""
    return sorted(records, key=_table_key)


def comparison_row(r: Record, name: str, v: Verdict) -> list[str]:
    """The comparison table's row of one judged metric (comparison_rows)."""
    shown_at = v.baseline if v.baseline is not None else v.current
    factor, shown = scale_for(v.unit, shown_at if shown_at is not None else 0.0)
    return [
        r.experiment.rsplit("::", 1)[-1],
        _params(r),
        name,
        "" if v.baseline is None
        else f"{format_number(v.baseline / factor, v.unit)} {shown}".strip(),
        "" if v.outcome == "missing" or v.current is None
        else f"{format_number(v.current / factor, v.unit)} {shown}".strip(),
        "" if v.change is None
        else f"{v.change:+.1%}{YARDSTICK_MARK if v.relative else ''}",
        v.outcome,
        "" if v.mdc is None else format_detectable(v.mdc) + (" (blind)" if v.has_blind_spot
                                                             else ""),
    ]


def blind_key(record: Record, name: str) -> tuple[str, str, str]:
    """The kind, test and metric a blind spot's line is counted under (lines.capped)."""
    return _BLIND_KIND, record.experiment.rsplit("::", 1)[-1], name


def blind_spots(records: list[Record]) -> list[tuple[Record, str, Verdict]]:
    """(row, metric, verdict) of every blind spot (its `blind` says what it cannot see, put in
    words where it is read: a sweep's thousands are counted, a few shown); a metric derived
    from a timing shares its timing's, said once."""
    found = []
    for r in records:
        for name, v in r.verdicts.items():
            if v.has_blind_spot:
                m = r.metric(name)
                if m is None or not m.derived_from:
                    found.append((r, name, v))
    return found


def _blind_note(spot: tuple[Record, str, Verdict]) -> str:
    record, name, verdict = spot
    return (f"{BLIND_MARK} {record.experiment.rsplit('::', 1)[-1]} "
            + (f"[{_params(record)}] " if record.params else "") + f"{name}: {verdict.blind}")


def accepted_note(record: Record, name: str) -> str | None:
    """The stored level's last accepted change of a metric, in its unit, with its row:
    "test_speed [size=2] tokens_per_s: accepted on 2026-11-23 14:02: 156 -> 226 1/s"."""
    v = record.verdicts.get(name)
    if v is None or v.accepted is None:
        return None
    when = v.accepted.on[:16].replace("T", " ")
    params = _params(record)
    return (f"{record.experiment.rsplit('::', 1)[-1]}{f' [{params}]' if params else ''} "
            f"{name}: accepted on {when}: {format_value(v.accepted.before, v.unit)} -> "
            f"{format_value(v.accepted.after, v.unit)}")


def comparison_table(records: list[Record], title: str = "Comparison with baseline"
                     ) -> Table | None:
    rows = comparison_rows(records)
    if not rows:
        return None
    notes = ["detectable: the smallest change this machine's noise lets a verdict see for the "
             "metric (the tolerance at least); the reason for each verdict is in the JSON and "
             "CSV reports"]
    notes += _unique(note for r in records for name in r.verdicts
                     if (note := accepted_note(r, name)))
    notes += capped([(blind_key(r, name), (r, name, v)) for r, name, v in blind_spots(records)],
                    "are blind spots too",
                    "marked (blind) in the table; the JSON report says why of each",
                    say=_blind_note)
    if any(YARDSTICK_MARK in row[5] for row in rows):
        notes.append(f"{YARDSTICK_MARK}: the change relative to the machine's yardstick (a "
                     "memcpy timed between the samples) or to its compute pace (a fixed loop "
                     "timed after them), which takes out the speed the whole "
                     "machine gained or lost between the runs; the verdict rests on it where "
                     "the runs show that it tracks the metric and its noise is the smaller, "
                     "and never where the values as measured moved the other way")
    return Table(title,
                 ["experiment", "params", "metric", "baseline", "current", "change", "verdict",
                  "detectable"], rows, notes=notes)


def _settings_notes(records: list[Record], shown: set[str]) -> list[str]:
    """The settings a pivot's columns leave out (a ceiling a % divides by), one line each with
    their values, so that every figure in the table can be traced to what it was divided by."""
    values: dict[str, list[Metric]] = {}
    for r in records:
        for m in r.metrics:
            if m.kind == "setting" and m.name not in shown:
                values.setdefault(m.name, []).append(m)
    lines = []
    for name, metrics in values.items():
        numbers = sorted({m.value for m in metrics})
        unit = metrics[0].unit
        if len(numbers) <= 3:
            text = ", ".join(format_value(v, unit) for v in numbers)
        else:
            text = f"{format_value(numbers[0], unit)} to {format_value(numbers[-1], unit)}"
        lines.append(f"setting {name}: {text}")
    return lines


def _notes(records: list[Record]) -> list[str]:
    notes = [f"{r.id}: {w}" for r in records for w in r.warnings]
    labelled = _unique(m.note for r in records for m in r.metrics if m.note)
    # Published figures are labelled as such, with where they come from, under every table.
    published = _unique(f"{m.name}: published reference, not measured here ({m.source})"
                        for r in records for m in r.metrics if m.kind == "reference")
    return notes + [f"note: {n}" for n in labelled] + [f"note: {p}" for p in published]


def build_tables(records: list[Record], comparison: str | None = None) -> list[Table]:
    """The report's tables; with `comparison` (its title), the comparison table too."""
    tables: list[Table] = []
    for title, group in group_by_experiment(records).items():
        spec = next((r.views["pivot"] for r in group if r.views.get("pivot")), None)
        if spec:
            tables.extend(pivot_tables(title, group, spec))
        else:
            tables.append(wide_table(title, group))
    if comparison:
        table = comparison_table(records, comparison)
        if table:
            tables.append(table)
    return tables


def _escaped(t: Table, escape: Callable[..., str]) -> Table:
    """The table as its medium can show it; an empty cell stays empty (tabulate's missing
    value)."""
    lines = {"cell": False} if escape is for_markdown else {}
    return Table(escape(t.title, **lines), [escape(h) for h in t.headers],
                 [[None if c is None else escape(c) for c in row] for row in t.rows],
                 [escape(n, **lines) for n in t.notes])


def render(tables: list[Table], fmt: str = "simple") -> str:
    from tabulate import tabulate

    parts = []
    for t in tables:
        t = _escaped(t, for_markdown if fmt == "github" else for_terminal)
        heading = f"## {t.title}" if fmt == "github" else t.title
        body = tabulate(t.rows, headers=t.headers, tablefmt=fmt, disable_numparse=True)
        notes = "\n".join(f"  {n}" if fmt != "github" else f"- {n}" for n in t.notes)
        parts.append("\n".join((heading, "", body, "", notes)).rstrip())
    return "\n\n".join(parts) + "\n"
