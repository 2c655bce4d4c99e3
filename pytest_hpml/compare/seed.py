"""Migration from pytest-benchmark: a run it saved (`.benchmarks/<machine>/NNNN_*.json`, or the
file of --benchmark-json) read as pytest-hpml records, and written into a baseline so that the
first comparison after switching has something to compare with.

Each benchmark becomes the metric `time` (its median, seconds per call; its samples where the
run kept them with --benchmark-save-data) of the record whose id is the benchmark's `fullname`:
pytest's node id, which is the record id pytest-hpml's `benchmark` fixture records under. Each
seeded metric says where it came from (Stored.seeded_from): one run measured by another tool
tells nothing of the spread between runs, so every verdict resting on it says so, and the first
save of pytest-hpml's own runs replaces it (compare/baselines.py).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpml.compare import baselines
from pytest_hpml.compare.history import MergePolicy
from pytest_hpml.machine.fingerprint import machine_key
from pytest_hpml.results import Metric, Record

#: The metric pytest-hpml's benchmark fixture records, and a seeded baseline holds.
METRIC = "time"


class NotPytestBenchmark(ValueError):
    """A file that is not a pytest-benchmark run; the message names it and what to give."""


def is_pytest_benchmark(document: Any) -> bool:
    """A pytest-benchmark run (saved, or --benchmark-json): its benchmarks and machine_info."""
    return (isinstance(document, dict) and isinstance(document.get("benchmarks"), list)
            and "machine_info" in document)


def saved_run(path: Path) -> Path:
    """The run file itself, or the newest saved run (the highest NNNN_) in a storage folder:
    `.benchmarks`, or one machine's folder inside it."""
    path = Path(path)
    if path.is_file():
        return path
    if not path.is_dir():
        raise NotPytestBenchmark(f"{path} does not exist; give a pytest-benchmark run file "
                                 "(.benchmarks/<machine>/0001_*.json, or --benchmark-json's)")
    runs = sorted(path.rglob("[0-9][0-9][0-9][0-9]_*.json"))
    folders = sorted({run.parent for run in runs})
    if not runs:
        raise NotPytestBenchmark(f"{path} holds no saved pytest-benchmark run (NNNN_*.json); "
                                 "save one with pytest --benchmark-autosave")
    if len(folders) > 1:
        raise NotPytestBenchmark(f"{path} holds the runs of {len(folders)} machines ("
                                 + ", ".join(f.name for f in folders) + "); give the folder "
                                 "of this machine's runs, or one run file")
    return max(runs, key=lambda run: run.name)


def describe(document: dict[str, Any], path: Path) -> str:
    """'a pytest-benchmark 5.1.0 run (0001_x.json, 2025-01-02T03:04:05, AMD EPYC 7B13)'."""
    cpu = document.get("machine_info", {}).get("cpu") or {}
    parts = [Path(path).name, document.get("datetime"),
             cpu.get("brand_raw") if isinstance(cpu, dict) else None]
    version = document.get("version")
    what = f"a pytest-benchmark {version} run" if version else "a pytest-benchmark run"
    return f"{what} ({', '.join(str(p) for p in parts if p)})"


def records_from(document: dict[str, Any], source: str) -> tuple[list[Record], list[str]]:
    """The records of a pytest-benchmark run, and one line per benchmark left out (why)."""
    records, left_out = [], []
    for bench in document["benchmarks"]:
        fullname = bench.get("fullname") or bench.get("name")
        # Files of pytest-benchmark 3 and later nest the figures in "stats"; older ones not.
        stats = bench.get("stats") if isinstance(bench.get("stats"), dict) else bench
        median = stats.get("median")
        if not fullname or not _finite(median) or median < 0:
            left_out.append(f"{fullname or bench!r}: no median time")
            continue
        data = stats.get("data")
        samples = [float(v) for v in data] if isinstance(data, list) and data and all(
            _finite(v) and v >= 0 for v in data) else None
        group = bench.get("group")
        params = {"test": fullname.split("::", 1)[-1].split("[", 1)[0],
                  **(bench.get("params") or {})}
        metric = Metric(name=METRIC, value=float(median), unit="s", better="lower",
                        samples=samples,
                        iqr=float(stats["iqr"]) if _finite(stats.get("iqr")) else None)
        records.append(Record(id=fullname, params=params, metrics=[metric],
                              experiment=f"benchmark {group!r}" if group else "benchmark"))
    return records, left_out


def read_run(path: Path) -> tuple[list[Record], str, list[str]]:
    """(records, where they come from in words, benchmarks left out) of a pytest-benchmark
    run file or storage folder."""
    path = saved_run(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise NotPytestBenchmark(f"cannot read {path}: {exc}") from exc
    if not is_pytest_benchmark(document):
        raise NotPytestBenchmark(f"{path} is not a pytest-benchmark run (no 'benchmarks' and "
                                 "'machine_info'); give .benchmarks/<machine>/NNNN_*.json or "
                                 "the file of --benchmark-json")
    source = describe(document, path)
    records, left_out = records_from(document, source)
    return records, source, left_out


@dataclass
class Seeded:
    path: Path
    source: str
    seeded: list[str] = field(default_factory=list)  # record ids written
    kept: list[str] = field(default_factory=list)  # ids pytest-hpml had measured: untouched
    left_out: list[str] = field(default_factory=list)


def seed(run: Path, directory: Path, fingerprint: dict[str, Any], profile: str) -> Seeded:
    """Write the benchmarks of a pytest-benchmark run into this machine's baseline file for
    `profile` in `directory`; rows the baseline already holds are kept as they are (pytest-hpml's
    own runs are never replaced by another tool's)."""
    records, source, left_out = read_run(run)
    path = baselines.baseline_path(directory, machine_key(fingerprint), profile)
    existing = baselines.load(path)
    held = set(existing.records) if existing else set()
    result = Seeded(path, source, left_out=left_out)
    result.kept = [r.id for r in records if r.id in held]
    new = [r for r in records if r.id not in held]
    if new:
        baselines.save(path, fingerprint, profile, new, MergePolicy(seeded_from=source))
    result.seeded = [r.id for r in new]
    return result


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(
        value)
