"""The baseline store: one JSON file per machine key and size profile.

Writes are atomic (temporary file, then
rename), so an interrupted save leaves the previous file intact. A file that cannot be read
is an error naming it, and is never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_hpml.fingerprint import machine_key
from pytest_hpml.results import Metric, Record

SCHEMA = "pytest-hpml/baseline/1"
#: Fields a comparison fills in; never stored.
COMPARISON_FIELDS = ("baseline", "change", "verdict", "p_value", "basis")


class BaselineError(Exception):
    """A baseline file that cannot be used; the message names the file and what to do."""


@dataclass
class Baseline:
    path: Path
    fingerprint: dict[str, Any]
    profile: str
    records: dict[str, dict[str, Any]]  # record id -> record dict

    def metrics_for(self, record_id: str) -> dict[str, Metric]:
        data = self.records.get(record_id)
        if not data:
            return {}
        return {m["name"]: Metric.from_dict(m) for m in data.get("metrics", [])}


def baseline_path(directory: Path, key: str, profile: str) -> Path:
    return Path(directory) / f"{key}-{profile}.json"


def load(path: Path) -> Baseline | None:
    """The baseline at `path`, None when there is none; BaselineError when unreadable."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BaselineError(
            f"baseline file {path} is not valid JSON ({exc}); it was left untouched. "
            "Fix or remove it, then rerun with --hpml-save-baseline to record a new one."
        ) from exc
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise BaselineError(
            f"baseline file {path} is not a pytest-hpml baseline (expected schema {SCHEMA!r}); "
            "it was left untouched. Move it away or point --hpml-baselines at another folder."
        )
    try:
        records = {r["id"]: r for r in data["records"]}
        for r in records.values():
            for m in r.get("metrics", []):
                Metric.from_dict(m)
        return Baseline(path, dict(data["fingerprint"]), str(data["profile"]), records)
    except (KeyError, TypeError, ValueError) as exc:
        raise BaselineError(
            f"baseline file {path} is damaged ({type(exc).__name__}: {exc}); it was left "
            "untouched. Remove it and rerun with --hpml-save-baseline."
        ) from exc


def save(path: Path, fingerprint: dict[str, Any], profile: str, records: list[Record]) -> Path:
    """Merge `records` into the file at `path` (new rows replace old ones with the same id)."""
    path = Path(path)
    existing = load(path)  # raises on a corrupt file, so it is never overwritten
    if existing and machine_key(existing.fingerprint) != machine_key(fingerprint):
        raise BaselineError(
            f"baseline file {path} belongs to machine {machine_key(existing.fingerprint)!r}, "
            f"not this one ({machine_key(fingerprint)!r}); it was left untouched."
        )
    merged = dict(existing.records) if existing else {}
    for record in records:
        data = record.to_dict()
        # Only measured figures are baselines: checks, references and settings are not.
        data["metrics"] = [m.to_dict() for m in record.metrics
                           if m.compared and m.verdict != "missing"]
        for metric in data["metrics"]:
            for key in COMPARISON_FIELDS:
                metric.pop(key, None)
        data.pop("expected_missing", None)
        merged[record.id] = data
    document = {
        "schema": SCHEMA,
        "fingerprint": fingerprint,
        "profile": profile,
        "records": [merged[k] for k in sorted(merged)],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(document, f, indent=1, sort_keys=False)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)  # atomic on POSIX and Windows
    except BaseException:
        # KeyboardInterrupt included: drop the partial file, the old baseline stays as it was.
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path
