"""Results files for tools: read a JSON report or a baseline file, and compare two of them
with the verdicts of --hpml-compare (pytest_hpml.compare_results, pytest_hpml.read_results)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_hpml.compare import baselines
from pytest_hpml.compare.noise import DEFAULT_DRIFT
from pytest_hpml.compare.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_DETECTABLE,
    DEFAULT_TOLERANCE,
    compare_record,
)
from pytest_hpml.results import Record


def read_results(path: str | Path) -> list[Record]:
    """The records of a results file: a JSON report (--hpml-report=run.json) or a baseline
    file. A file that is neither, or a damaged one, is a ValueError naming it."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ValueError(f"cannot read results from {path}: {what}") from None
    baseline = isinstance(data, dict) and str(data.get("schema", "")).startswith(
        baselines.SCHEMA_PREFIX)
    if baseline or (isinstance(data, dict) and isinstance(data.get("records"), list)):
        # A baseline of this version or another is read by the store's own rules.
        found = baselines.parse(path, text).records.values() if baseline else data["records"]
        try:
            return [Record.from_dict(r) for r in found]
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            what = "baseline file" if baseline else "pytest-hpml report"
            raise ValueError(f"{path} is a damaged {what}: {exc!r}") from None
    raise ValueError(f"{path} is neither a pytest-hpml JSON report nor a baseline file")


def compare_results(baseline: str | Path | list[Record], current: str | Path | list[Record], *,
                    tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
                    drift: float = DEFAULT_DRIFT,
                    max_detectable: float | None = DEFAULT_MAX_DETECTABLE) -> list[Record]:
    """The stable entry point for tools: `current`'s records with the verdict of every
    measured metric against `baseline` (each a results file or a list of records), as
    --hpml-compare gives them without confirmation runs; baseline metrics a record lacks come
    back as 'missing'. The caller's records are not changed."""
    old = baseline if isinstance(baseline, list) else read_results(baseline)
    new = current if isinstance(current, list) else read_results(current)
    by_id = {r.id: {m.name: m for m in r.metrics} for r in old}
    out = []
    for record in new:
        record = Record.from_dict(record.to_dict())  # the caller's records stay as they were
        record.metrics.extend(compare_record(record, by_id.get(record.id, {}), tolerance, alpha,
                                             drift=drift, max_detectable=max_detectable))
        out.append(record)
    return out
