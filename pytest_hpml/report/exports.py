"""Exports for CI dashboards that already exist, so results flow in without glue code.

Only measured metrics are dashboard series: checks (correctness errors), published references
and settings are not. A point that is not a finite number is left out, with one message.

Each series keeps one unit for ever, its SI base unit (s, B/s, FLOP/s ...): a unit scaled per
run (990 GB/s one day, 1.01 TB/s the next) would read as a 1000x cliff on a dashboard that does
not convert units. The value is the one a verdict rests on (the median of the run's processes,
with any fresh ones), and its range the uncertainty of that median (its notch), not the
spread of single samples.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pytest_hpml.measure.stats import median_uncertainty
from pytest_hpml.plain_numbers import json_safe
from pytest_hpml.report.files import write_atomic
from pytest_hpml.results import Metric, Record, measured_figures

Say = Callable[[str], None]


def _name(record: Record, metric_name: str) -> str:
    return f"{record.id} :: {metric_name}"


def _series(records: list[Record], say: Say | None, tool: str) -> list[tuple[Record, Metric]]:
    points, dropped = [], []
    for r in records:
        kept, not_numbers = measured_figures(r)
        points += [(r, m) for m in kept]
        dropped += [f"{_name(r, m.name)} = {m.value}" for m in not_numbers]
    if dropped and say:
        say(f"{tool}: {len(dropped)} non-finite point(s) left out of the export: "
            + "; ".join(dropped[:5]) + (" ..." if len(dropped) > 5 else ""))
    return points


def point(record: Record, metric: Metric) -> tuple[float, float | None]:
    """(value, half-width of its ~95 % interval) of a series point: the median of the process
    values the verdict rests on, and the notch of the samples (1.57 IQR / sqrt(n)); None where
    there are too few samples for one."""
    value = record.values_of(metric.name).value
    notch = median_uncertainty(metric.samples or [])
    return value, (notch * abs(value) if notch else None)


def benchmark_action(records: list[Record], say: Say | None = None) -> dict[str, list[dict]]:
    """github-action-benchmark's custom format, one list per direction.

    That action takes one file per tool, so the two lists go to two files:
    customSmallerIsBetter and customBiggerIsBetter.
    """
    out: dict[str, list[dict]] = {"customSmallerIsBetter": [], "customBiggerIsBetter": []}
    for r, m in _series(records, say, "github-action-benchmark"):
        if m.better is None:
            continue
        value, notch = point(r, m)
        entry = {"name": _name(r, m.name), "unit": m.unit, "value": value}
        if notch is not None:
            entry["range"] = f"± {notch:.4g}"
        params = ", ".join(f"{k}={v}" for k, v in r.params.items())
        if params:
            entry["extra"] = params
        key = "customSmallerIsBetter" if m.better == "lower" else "customBiggerIsBetter"
        out[key].append(entry)
    return out


def write_benchmark_action(path: Path, records: list[Record], say: Say | None = None
                           ) -> list[Path]:
    """PATH gets the smaller-is-better entries, PATH with '-bigger' the bigger-is-better ones;
    only files with entries are written (the action fails on an empty list), and a file that
    would be empty is said."""
    path = Path(path)
    data = benchmark_action(records, say)
    written = []
    for target, key, what in ((path, "customSmallerIsBetter", "smaller-is-better"),
                              (bigger_path(path), "customBiggerIsBetter", "bigger-is-better")):
        if not data[key]:
            if say:
                say(f"github-action-benchmark: no {what} metric in this run, so {target} was "
                    "not written")
            continue
        text = json.dumps(json_safe(data[key]), indent=1, allow_nan=False)
        write_atomic(target, lambda f, text=text: f.write(text))
        written.append(target)
    return written


def bigger_path(path: Path) -> Path:
    """The second file of a github-action-benchmark export: its bigger-is-better entries."""
    path = Path(path)
    return path.with_name(f"{path.stem}-bigger{path.suffix or '.json'}")


def bencher_bmf(records: list[Record], say: Say | None = None
                ) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: {benchmark: {measure: {value, lower_value, upper_value}}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r, m in _series(records, say, "Bencher"):
        value, notch = point(r, m)
        entry = {"value": value}
        if notch is not None:
            entry["lower_value"] = value - notch
            entry["upper_value"] = value + notch
        out.setdefault(r.id, {})[f"{m.name} ({m.unit})" if m.unit else m.name] = entry
    return out


def write_bencher(path: Path, records: list[Record], say: Say | None = None) -> Path:
    path = Path(path)
    text = json.dumps(json_safe(bencher_bmf(records, say)), indent=1, allow_nan=False)
    write_atomic(path, lambda f: f.write(text))
    return path
