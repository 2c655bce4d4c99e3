"""What the dashboard shows, read from baseline files (and the latest run's report): one Series
per stored measured metric of a machine and profile, its history cut into the saves that made
it (with each save's date and commit, where the file knows them), and its accepted levels.

A file that cannot be used is one line naming it; the others are read all the same."""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpml.compare import baselines
from pytest_hpml.compare.noise import occasions
from pytest_hpml.compare.stored import Stored
from pytest_hpml.machine.fingerprint import machine_key
from pytest_hpml.results import Metric, Record, Replicates, Verdict


@dataclass(frozen=True)
class Save:
    """One save of a metric: the values of its processes, and where they came from."""

    id: str | None  # None: saved before saves had ids (provenance unknown)
    on: str | None
    commit: str | None
    values: tuple[float, ...]


@dataclass(frozen=True)
class Accepted:
    """A change a save accepted: the level before it and the one it started."""

    on: str
    before: float
    after: float
    save: str | None
    commit: str | None


@dataclass(frozen=True)
class Run:
    """A metric in the latest run's report: what its process measured, the values of every
    process of the run, and its verdict."""

    metric: Metric
    values: Replicates
    verdict: Verdict | None


@dataclass
class Series:
    """One measured metric of one row, on one machine and profile."""

    file: Path
    machine: str  # the machine key that names the file
    hardware: str  # the GPU (or CPU) model, in words
    profile: str
    record_id: str
    test: str  # the test function: the row's id less its parameters
    row: str  # the row's parameters as in its id ("" for a test of one row)
    lab: str  # the test file's folder (a lab of this repository), or its module
    experiment: str
    metric: Stored  # as stored (history, the latest run's summary, accepted levels)
    saves: list[Save]
    accepted: list[Accepted]
    save_order: dict[str, int]  # the file's saves, oldest first: their place on a chart
    run: Run | None = None  # the same metric in the latest run's report, verdict included
    # The node id of the test that made the row, as stored ("" for rows of other origins): a
    # comparison judges a test's rows that record one metric as one family.
    node: str = ""

    @property
    def name(self) -> str:
        return self.metric.name

    @property
    def key(self) -> str:
        """What tells this series apart from every other one of the site."""
        return f"{self.machine}|{self.profile}|{self.record_id}|{self.name}"


@dataclass
class Found:
    series: list[Series] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # one line per file that was skipped
    files: list[Path] = field(default_factory=list)  # the baseline files read


def split_id(record_id: str) -> tuple[str, str]:
    """(test function, row parameters) of a row id: 'f.py::t[a-b]' -> ('f.py::t', 'a-b')."""
    head, bracket, rest = record_id.partition("[")
    return head, rest[:-1] if bracket and rest.endswith("]") else rest


def natural(text: str) -> list[tuple[int, float | str]]:
    """A sort key that puts the rows of a sweep in the order of their numbers (k=1, k=10,
    k=100; 0.01 before 0.1), not of their characters."""
    key: list[tuple[int, float | str]] = []
    for i, part in enumerate(re.split(r"(\d+(?:\.\d+)?(?:e[-+]?\d+)?)", text)):
        if part:
            key.append((0, float(part)) if i % 2 else (1, part))
    return key


def lab_of(test: str) -> str:
    """The folder of the test file ('suites/vector_add/test_x.py::t' -> 'vector_add'), or the
    module of a test file at the root."""
    path = Path(test.split("::", 1)[0])
    return path.parent.name or path.stem or test


def hardware_of(facts: dict[str, Any]) -> str:
    if facts.get("gpu"):
        return f"{facts['gpu']} x{facts.get('gpu_count') or 1}"
    return f"{facts.get('cpu') or 'unknown CPU'} ({facts.get('cpu_cores')} cores)"


def baseline_files(paths: list[Path]) -> tuple[list[Path], list[str]]:
    """The files named, and the *.json files of the folders named; one line for each path
    that does not exist."""
    found, problems = [], []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.glob("*.json") if p.is_file())
        elif path.exists():
            found.append(path)
        else:
            problems.append(f"{path}: no such file or folder")
    return found, problems


def _saves(m: dict[str, Any], table: dict[str, Any]) -> list[Save]:
    history = [float(v) for v in m.get("history") or [m["value"]]]
    counts = m.get("history_saves") or None
    groups = occasions(history, counts)
    ids = list(m.get("history_save_ids") or [])
    ids = [None] * (len(groups) - len(ids)) + ids[-len(groups):] if groups else []
    out = []
    for sid, values in zip(ids, groups, strict=True):
        facts = table.get(sid) or {}
        out.append(Save(sid, facts.get("on"), facts.get("commit"),
                        tuple(v for v in values if math.isfinite(v))))
    return out


def _accepted(m: dict[str, Any], table: dict[str, Any]) -> list[Accepted]:
    return [Accepted(str(a["on"]), float(a["before"]), float(a["after"]), a.get("save"),
                     (table.get(a.get("save")) or {}).get("commit"))
            for a in m.get("accepted") or []]


def read_baseline(path: Path) -> list[Series]:
    """Every stored measured metric of the baseline at `path` (BaselineError when it cannot
    be used, as a comparison would refuse it)."""
    loaded = baselines.load(path)
    if loaded is None:
        raise baselines.BaselineError(f"baseline file {path} does not exist")
    table = loaded.saves
    order = {sid: i for i, sid in enumerate(
        sorted(table, key=lambda s: (str(table[s].get("on")), s)))}
    machine, hardware = machine_key(loaded.fingerprint), hardware_of(loaded.fingerprint)
    found = []
    for rid in sorted(loaded.records):
        record = loaded.records[rid]
        test, row = split_id(rid)
        params = record.get("params") or {}
        row = ", ".join(f"{k}={v}" for k, v in params.items()) if params else row
        for m in record.get("metrics", []):
            if m.get("kind", "measured") != "measured":
                continue
            found.append(Series(path, machine, hardware, loaded.profile, rid, test, row,
                                lab_of(record.get("test") or test),
                                str(record.get("experiment", "")), Stored.from_dict(m),
                                _saves(m, table), _accepted(m, table), order,
                                node=str(record.get("test") or "")))
    return found


def read_runs(paths: list[Path]) -> tuple[dict[tuple[str, str, str, str], Run], list[str]]:
    """The metrics of the latest runs' JSON reports, by (machine, profile, row, metric), and
    one line per report that cannot be used."""
    runs: dict[tuple[str, str, str, str], Run] = {}
    problems = []
    for path in map(Path, paths):
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
            machine = machine_key(document["fingerprint"])
            profile = str(document["profile"])
            for data in document["records"]:
                record = Record.from_dict(data)
                for metric in record.metrics:
                    if metric.compared:
                        runs[(machine, profile, record.id, metric.name)] = Run(
                            metric, record.values_of(metric.name), record.verdict(metric.name))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError,
                AttributeError) as exc:
            problems.append(f"{path}: not a pytest-hpml JSON report ({exc!r}), so its "
                            "verdicts are not shown")
    return runs, problems


def read(paths: list[Path], reports: list[Path] = ()) -> Found:
    """Every series of the baseline files (or folders of them) in `paths`, with the metrics
    of the latest runs' reports beside them."""
    files, problems = baseline_files(paths)
    found = Found(problems=problems)
    for path in files:
        try:
            found.series += read_baseline(path)
            found.files.append(path)
        except baselines.BaselineError as exc:
            found.problems.append(f"{path}: {_reason(path, exc)}")
    runs, problems = read_runs(list(reports))
    found.problems += problems
    for s in found.series:
        s.run = runs.get((s.machine, s.profile, s.record_id, s.name))
    return found


def _reason(path: Path, exc: Exception) -> str:
    """The store's message, less the file name the dashboard's line starts with, and less its
    advice to rerun a save (the dashboard only reads)."""
    text = str(exc).replace(f"baseline file {path} ", "", 1)
    return text.split("; it was left untouched")[0]
