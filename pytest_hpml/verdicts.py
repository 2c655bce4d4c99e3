"""Verdicts: how each measured metric of a run compares with the stored baseline.

Only measured metrics get verdicts: checks fail by their own limit in the run, references and
settings are shown and never compared. A metric the baseline has and the run lacks is
`missing`, which fails the comparison unless the row says it may be absent.
"""

from __future__ import annotations

import math
from pathlib import Path

from pytest_hpml.results import Metric, Record
from pytest_hpml.stats import mann_whitney_u, noise_ratio, summarize

DEFAULT_TOLERANCE = 0.10
DEFAULT_ALPHA = 0.01
MIN_SAMPLES_FOR_TEST = 9


def relative_change(old: float, new: float) -> float:
    if old == new:
        return 0.0
    if old == 0:
        return math.copysign(math.inf, new)
    return (new - old) / abs(old)


def compare_metric(current: Metric, base: Metric | None, tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA) -> Metric:
    """Fill current.baseline / change / verdict (and p_value when a test was run)."""
    if not current.compared:
        return current
    if base is None:
        current.verdict = "new"
        return current
    tol = current.tolerance if current.tolerance is not None else tolerance
    current.baseline = base.value
    if not math.isfinite(current.value):
        # A number was recorded before and now there is none: the run is broken, whatever
        # the metric's direction.
        current.verdict = "regressed"
        current.basis = f"the value is {current.value}, not a number as in the baseline"
        return current
    change = current.change = relative_change(base.value, current.value)
    if math.isnan(change):  # an old baseline that stored NaN: nothing to compare with
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
        if (noise_ratio(summarize(current.samples)) is not None
                or noise_ratio(summarize(base.samples)) is not None):
            # Samples from a disturbed run are shifted as a whole, which the rank test reads
            # as significant; a measurement whose own spread is that wide carries no verdict.
            current.verdict = "ambiguous"
            return current
    current.verdict = "regressed" if worse else "improved"
    return current


def compare_record(record: Record, old: dict[str, Metric], tolerance: float = DEFAULT_TOLERANCE,
                   alpha: float = DEFAULT_ALPHA) -> list[Metric]:
    """Verdicts for every metric of `record` against `old` (the baseline's metrics of the same
    row); returns a 'missing' metric for each baseline metric the row lacks."""
    for metric in record.metrics:
        compare_metric(metric, old.get(metric.name), tolerance, alpha)
    missing = []
    for name, base in old.items():
        if record.metric(name) is None and base.compared:
            missing.append(Metric(name=name, value=math.nan, unit=base.unit, better=base.better,
                                  baseline=base.value, verdict="missing",
                                  note=None if not record.may_miss(name) else "expected"))
    return missing


def failures(record: Record, tolerance: float = DEFAULT_TOLERANCE) -> list[str]:
    """One line per metric of a compared record that fails the comparison."""
    lines = []
    for m in record.metrics:
        if m.verdict == "regressed" and not math.isfinite(m.value):
            lines.append(f"{record.id} {m.name}: {m.value} where the baseline has "
                         f"{m.baseline:.6g} {m.unit}".rstrip() + " (the run produced no number)")
        elif m.verdict == "regressed":
            p = f", Mann-Whitney p={m.p_value:.2g}" if m.p_value is not None else ""
            tol = m.tolerance if m.tolerance is not None else tolerance
            lines.append(f"{record.id} {m.name}: {m.baseline:.6g} -> {m.value:.6g} {m.unit} "
                         f"({m.change:+.1%}, tolerance {tol:.0%}{p})")
        elif m.verdict == "missing" and not record.may_miss(m.name):
            was = f"{m.baseline:.6g} {m.unit}".strip()
            lines.append(f"{record.id} {m.name}: in the baseline ({was}) but "
                         "not recorded by this run; if that is expected (an out-of-memory "
                         "batch, a removed metric), call hpml.expect_missing(...) in the test")
    return lines


def read_results(path: str | Path) -> list[Record]:
    """The records of a results file: a JSON report (--hpml-report=run.json) or a baseline
    file. A file that is neither is a ValueError naming it."""
    import json

    from pytest_hpml import baselines

    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"cannot read results from {path}: {exc}") from exc
    if isinstance(data, dict) and data.get("schema") == baselines.SCHEMA:
        base = baselines.load(path)
        return [Record.from_dict(r) for r in base.records.values()] if base else []
    if isinstance(data, dict) and isinstance(data.get("records"), list):
        try:
            return [Record.from_dict(r) for r in data["records"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path} is a damaged pytest-hpml report: {exc}") from exc
    raise ValueError(f"{path} is neither a pytest-hpml JSON report nor a baseline file")


def compare_results(baseline: str | Path | list[Record], current: str | Path | list[Record], *,
                    tolerance: float = DEFAULT_TOLERANCE,
                    alpha: float = DEFAULT_ALPHA) -> list[Record]:
    """The stable entry point for tools: `current`'s records with the verdict of every
    measured metric against `baseline` (each a results file or a list of records), as
    --hpml-compare gives them; baseline metrics a record lacks come back as 'missing'."""
    old = baseline if isinstance(baseline, list) else read_results(baseline)
    new = current if isinstance(current, list) else read_results(current)
    by_id = {r.id: {m.name: m for m in r.metrics} for r in old}
    out = []
    for record in new:
        record = Record.from_dict(record.to_dict())  # the caller's records stay as they were
        record.metrics.extend(compare_record(record, by_id.get(record.id, {}), tolerance, alpha))
        out.append(record)
    return out
