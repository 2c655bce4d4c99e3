"""The baseline store and the per-metric verdicts.

One JSON file per machine key and size profile. Writes are atomic (temporary file, then
rename), so an interrupted save leaves the previous file intact. A file that cannot be read
is an error naming it, and is never overwritten.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pytest_hpml.fingerprint import machine_key
from pytest_hpml.results import Metric, Record
from pytest_hpml.stats import mann_whitney_u, summarize
from pytest_hpml.timing import NOISY_IQR_RATIO

SCHEMA = "pytest-hpml/baseline/1"
DEFAULT_TOLERANCE = 0.10
DEFAULT_ALPHA = 0.01
MIN_SAMPLES_FOR_TEST = 9


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
        data["metrics"] = [m for m in data["metrics"] if m.get("verdict") != "missing"]
        for metric in data["metrics"]:
            for key in ("baseline", "change", "verdict", "p_value"):
                metric.pop(key, None)
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


def compare_metric(current: Metric, base: Metric | None, tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA) -> Metric:
    """Fill current.baseline / change / verdict (and p_value when a test was run)."""
    if base is None:
        current.verdict = "new"
        return current
    tol = current.tolerance if current.tolerance is not None else tolerance
    current.baseline = base.value
    if base.value == current.value:
        change = 0.0
    elif base.value == 0:
        change = math.copysign(math.inf, current.value)
    else:
        change = (current.value - base.value) / abs(base.value)
    current.change = change
    if math.isnan(change):
        # A NaN on either side has no direction: shown, never ranked as better or worse.
        current.verdict = "ambiguous"
        return current
    if abs(change) <= tol:
        current.verdict = "unchanged"
        return current
    if current.better is None:
        # A change with no good direction (a count, a size): shown, never a regression.
        current.verdict = "ambiguous"
        return current
    worse = change > 0 if current.better == "lower" else change < 0
    if (current.samples and base.samples and len(current.samples) >= MIN_SAMPLES_FOR_TEST
            and len(base.samples) >= MIN_SAMPLES_FOR_TEST):
        _, p = mann_whitney_u(current.samples, base.samples)
        current.p_value = p
        if p >= alpha:
            current.verdict = "ambiguous"  # beyond tolerance, but within the noise
            return current
        if _noisy(current.samples) or _noisy(base.samples):
            # Samples from a disturbed run (a noisy neighbour, a clock change) are shifted as a
            # whole, which the rank test reads as significant; a measurement whose own spread
            # is that wide cannot carry a verdict either way.
            current.verdict = "ambiguous"
            return current
    current.verdict = "regressed" if worse else "improved"
    return current


def _noisy(samples: list[float]) -> bool:
    s = summarize(samples)
    return s.median > 0 and s.iqr / s.median >= NOISY_IQR_RATIO


def compare_record(record: Record, baseline: Baseline, tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA) -> list[Metric]:
    """Verdicts for every metric of `record`; baseline metrics it lacks come back as 'missing'."""
    old = baseline.metrics_for(record.id)
    for metric in record.metrics:
        compare_metric(metric, old.get(metric.name), tolerance, alpha)
    missing = []
    for name, base in old.items():
        if record.metric(name) is None:
            missing.append(Metric(name=name, value=math.nan, unit=base.unit, better=base.better,
                                  baseline=base.value, verdict="missing"))
    return missing
