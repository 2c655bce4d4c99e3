"""Exports for CI dashboards that already exist, so results flow in without glue code."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_hpml.results import Record
from pytest_hpml.units import scale_for


def _name(record: Record, metric_name: str) -> str:
    return f"{record.id} :: {metric_name}"


def benchmark_action(records: list[Record]) -> dict[str, list[dict]]:
    """github-action-benchmark's custom format, one list per direction.

    That action takes one file per tool, so the two lists go to two files:
    customSmallerIsBetter and customBiggerIsBetter.
    """
    out: dict[str, list[dict]] = {"customSmallerIsBetter": [], "customBiggerIsBetter": []}
    for r in records:
        for m in r.metrics:
            # Correctness errors are checks, not performance series for a dashboard.
            if m.better is None or m.verdict == "missing" or m.note == "correctness":
                continue
            factor, unit = scale_for(m.unit, m.value)
            entry = {"name": _name(r, m.name), "unit": unit, "value": m.value / factor}
            if m.iqr is not None:
                entry["range"] = f"± {m.iqr / factor:.4g}"
            params = ", ".join(f"{k}={v}" for k, v in r.params.items())
            if params:
                entry["extra"] = params
            key = "customSmallerIsBetter" if m.better == "lower" else "customBiggerIsBetter"
            out[key].append(entry)
    return out


def write_benchmark_action(path: Path, records: list[Record]) -> list[Path]:
    """PATH gets the smaller-is-better entries, PATH with '-bigger' the bigger-is-better ones."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = benchmark_action(records)
    bigger = path.with_name(f"{path.stem}-bigger{path.suffix or '.json'}")
    path.write_text(json.dumps(data["customSmallerIsBetter"], indent=1), encoding="utf-8")
    bigger.write_text(json.dumps(data["customBiggerIsBetter"], indent=1), encoding="utf-8")
    return [path, bigger]


def bencher_bmf(records: list[Record]) -> dict[str, dict[str, dict[str, float]]]:
    """Bencher Metric Format: {benchmark: {measure: {value, lower_value, upper_value}}}."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for r in records:
        for m in r.metrics:
            if m.verdict == "missing":
                continue
            entry = {"value": m.value}
            if m.samples:
                entry["lower_value"] = min(m.samples)
                entry["upper_value"] = max(m.samples)
            out.setdefault(r.id, {})[f"{m.name} ({m.unit})" if m.unit else m.name] = entry
    return out


def write_bencher(path: Path, records: list[Record]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(bencher_bmf(records), indent=1), encoding="utf-8")
    return path
