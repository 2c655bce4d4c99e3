"""The report as a file: Markdown, JSON (every record with samples) or CSV, by extension."""

from __future__ import annotations

import csv
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from pytest_hpml.report.tables import build_tables, render
from pytest_hpml.results import Record, json_safe

REPORT_SUFFIXES = (".md", ".json", ".csv")


@dataclass
class Output:
    """A file (or a folder of charts) written at the end of a run: `write` writes it and
    returns the paths it wrote; `label` names it when it cannot be written."""

    label: str
    path: Path
    write: Callable[[], list[Path]]
CSV_COLUMNS = ["experiment", "id", "params", "metric", "kind", "value", "unit", "better", "iqr",
               "n_samples", "baseline", "change", "verdict", "detectable", "basis", "source",
               "note"]


def _csv_number(value: float | None) -> str:
    """Every digit (repr), so a CSV reader gets the value itself, not a rounded one."""
    return "" if value is None else repr(value)


def write_csv(stream: TextIO, records: list[Record]) -> None:
    """Every metric of `records`, one row each, with its verdict where it has one."""
    writer = csv.writer(stream)
    writer.writerow(CSV_COLUMNS)
    for r in records:
        params = ";".join(f"{k}={v}" for k, v in r.params.items())
        for m in r.metrics:
            v = m.verdict
            writer.writerow([r.experiment, r.id, params, m.name, m.kind, repr(m.value),
                             m.unit, m.better or "", _csv_number(m.iqr),
                             len(m.samples) if m.samples else "",
                             _csv_number(v and v.baseline), _csv_number(v and v.change),
                             v.outcome if v else "", _csv_number(v and v.mdc),
                             (v and v.basis) or "", m.source or "", m.note or ""])


def write_report(path: Path, records: list[Record], fingerprint: dict[str, Any], profile: str,
                 compare: bool) -> Path:
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in REPORT_SUFFIXES:
        raise ValueError(f"report file {path} must end in one of {REPORT_SUFFIXES}")
    path.parent.mkdir(parents=True, exist_ok=True)
    if suffix == ".md":
        header = (f"# pytest-hpml report\n\nProfile: {profile}. Machine: "
                  + ", ".join(f"{k}={v}" for k, v in fingerprint.items() if v is not None)
                  + "\n\n")
        path.write_text(header + render(build_tables(records, compare), "github"),
                        encoding="utf-8")
    elif suffix == ".json":
        document = {"fingerprint": fingerprint, "profile": profile,
                    "records": [r.to_dict() for r in records]}
        path.write_text(json.dumps(json_safe(document), indent=1, allow_nan=False),
                        encoding="utf-8")
    else:
        with path.open("w", newline="", encoding="utf-8") as f:
            write_csv(f, records)
    return path
