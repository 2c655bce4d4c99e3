"""Results files for tools: read a JSON report or a baseline file, and compare two of them with
the verdicts of --hpml-compare (pytest_hpml.compare_results, pytest_hpml.read_results). A file
read as the evidence of a comparison (Evidence) is one more source for the comparison engine:
a baseline file gives its stored history, a report the values of the processes it holds (one
occasion), a pytest-benchmark run its medians (seeded: spread unknown)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pytest_hpml.compare import baselines, drift_prior, engine, seed
from pytest_hpml.compare.advice import ReportAdvice
from pytest_hpml.compare.noise import DEFAULT_DRIFT
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import (
    DEFAULT_ALPHA,
    DEFAULT_MAX_DETECTABLE,
    DEFAULT_TOLERANCE,
    Rules,
)
from pytest_hpml.machine.fingerprint import machine_key
from pytest_hpml.results import Record


def _load(path: Path) -> tuple[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
        return text, json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        what = "nested too deeply" if isinstance(exc, RecursionError) else exc
        raise ValueError(f"cannot read results from {path}: {what}") from None


def _records(path: Path, found: Any, what: str) -> list[Record]:
    try:
        return [Record.from_dict(r) for r in found]
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path} is a damaged {what}: {exc!r}") from None


def read_results(path: str | Path) -> list[Record]:
    """The records of a results file: a JSON report (--hpml-report=run.json) or a baseline
    file. A file that is neither, or a damaged one, is a ValueError naming it."""
    return read_evidence(path).records


class Evidence(engine.Source):
    """A results file as the evidence of a comparison: its rows, the machine and profile it
    was measured on, and its metrics in stored form."""

    def __init__(self, path: Path, kind: str, records: list[Record],
                 baseline: baselines.Baseline | None = None, machine: str | None = None,
                 profile: str | None = None, seeded_from: str | None = None) -> None:
        self.path = path
        self.kind = kind  # "report", "baseline" or "pytest-benchmark run"
        self.records = records
        self.baseline = baseline
        self.machine = machine
        self.profile = profile
        self.label = f"{path.name}"
        self.seeded_from = seeded_from  # another tool measured it (seed.py)
        self.advice = ReportAdvice()
        self._by_id = {r.id: r for r in records}

    def stored(self, record_id: str) -> dict[str, Stored]:
        if self.baseline is not None:
            return self.baseline.metrics_for(record_id)
        record = self._by_id.get(record_id)
        if record is None:
            return {}
        found = {m.name: Stored.of_report(m, record.values_of(m.name))
                 for m in record.metrics if m.compared}
        for stored in found.values():
            stored.seeded_from = self.seeded_from
        return found

    def rows(self) -> list[Record]:
        return list(self.records)


def read_evidence(path: str | Path) -> Evidence:
    """A results file (a pytest-hpml report or baseline, or a pytest-benchmark run: a file or
    its storage folder) as evidence; a ValueError naming it where it is neither, or damaged."""
    path = Path(path)
    if path.is_dir():
        records, source, _ = seed.read_run(path)
        return _benchmark_evidence(path, records, source)
    text, data = _load(path)
    if seed.is_pytest_benchmark(data):
        records, source, _ = seed.read_run(path)
        return _benchmark_evidence(path, records, source)
    if not isinstance(data, dict):
        raise ValueError(f"{path} is neither a pytest-hpml JSON report nor a baseline file "
                         f"(it holds a JSON {type(data).__name__})")
    profile = data.get("profile") if isinstance(data.get("profile"), str) else None
    if str(data.get("schema", "")).startswith(baselines.SCHEMA_PREFIX):
        # A baseline of this version or another is read by the store's own rules.
        baseline = baselines.parse(path, text)
        records = _records(path, baseline.records.values(), "baseline file")
        return Evidence(path, "baseline", records, baseline,
                        machine_key(baseline.fingerprint), profile)
    if isinstance(data.get("records"), list):
        records = _records(path, data["records"], "pytest-hpml report")
        return Evidence(path, "report", records, None, _machine(path, data), profile)
    raise ValueError(f"{path} is neither a pytest-hpml JSON report nor a baseline file")


def _machine(path: Path, data: dict[str, Any]) -> str | None:
    facts = data.get("fingerprint")
    if not isinstance(facts, dict):
        return None
    try:
        return machine_key(facts)
    except (TypeError, ValueError, AttributeError) as exc:
        raise ValueError(f"{path} is a damaged pytest-hpml report: its fingerprint holds "
                         f"{exc}") from None


def _benchmark_evidence(path: Path, records: list[Record], source: str) -> Evidence:
    return Evidence(path, "pytest-benchmark run", records, seeded_from=source)


def compare_results(baseline: str | Path | list[Record], current: str | Path | list[Record], *,
                    tolerance: float = DEFAULT_TOLERANCE, alpha: float = DEFAULT_ALPHA,
                    drift: float = DEFAULT_DRIFT,
                    max_detectable: float | None = DEFAULT_MAX_DETECTABLE) -> list[Record]:
    """The stable entry point for tools: `current`'s records with the verdict of every
    measured metric against `baseline` (each a results file or a list of records), as
    --hpml-compare gives them without confirmation runs, through the same engine; a metric of
    the baseline that a record lacks is `missing`, and so is every metric of a row of the
    baseline that `current` lacks (appended after `current`'s rows). The caller's records are
    not changed."""
    old = baseline if isinstance(baseline, Evidence) else Evidence(
        Path("baseline"), "records", [Record.from_dict(r.to_dict()) for r in baseline]) \
        if isinstance(baseline, list) else read_evidence(baseline)
    new = current if isinstance(current, list) else read_results(current)
    return judge_all(old, new, Rules(tolerance, alpha, drift, max_detectable))


def judge_all(old: Evidence, new: list[Record], rules: Rules) -> list[Record]:
    """`new`'s records (copies) judged against `old`, and `old`'s rows that `new` lacks as
    rows of `missing` metrics."""
    out = [Record.from_dict(r.to_dict()) for r in new]  # the caller's records stay as they were
    engine.judge_rows(out, old.stored, drift_prior.of_baseline(rules, old.baseline),
                      advice=old.advice)
    made = {r.id for r in out}
    for row in old.rows():
        if row.id not in made and old.stored(row.id):
            out.append(engine.missing_row(row, old.stored(row.id)))
    return out
