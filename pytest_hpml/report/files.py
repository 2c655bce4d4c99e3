"""The report as a file: Markdown, JSON (every record with samples) or CSV, by extension."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from pytest_hpml.report.tables import build_tables, render
from pytest_hpml.results import Record

REPORT_SUFFIXES = (".md", ".json", ".csv")


def write_report(path: Path, records: list[Record], fingerprint: dict[str, Any], profile: str,
                 compare: bool) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    suffix = path.suffix.lower()
    if suffix == ".md":
        header = (f"# pytest-hpml report\n\nProfile: {profile}. Machine: "
                  + ", ".join(f"{k}={v}" for k, v in fingerprint.items() if v is not None)
                  + "\n\n")
        path.write_text(header + render(build_tables(records, compare), "github"),
                        encoding="utf-8")
    elif suffix == ".json":
        document = {"fingerprint": fingerprint, "profile": profile,
                    "records": [r.to_dict() for r in records]}
        path.write_text(json.dumps(document, indent=1), encoding="utf-8")
    elif suffix == ".csv":
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(["experiment", "id", "params", "metric", "value", "unit", "better",
                             "iqr", "n_samples", "baseline", "change", "verdict", "note"])
            for r in records:
                params = ";".join(f"{k}={v}" for k, v in r.params.items())
                for m in r.metrics:
                    writer.writerow([r.experiment, r.id, params, m.name, repr(m.value), m.unit,
                                     m.better or "", "" if m.iqr is None else repr(m.iqr),
                                     len(m.samples) if m.samples else "",
                                     "" if m.baseline is None else repr(m.baseline),
                                     "" if m.change is None else repr(m.change),
                                     m.verdict or "", m.note or ""])
    else:
        raise ValueError(f"report file {path} must end in one of {REPORT_SUFFIXES}")
    return path
