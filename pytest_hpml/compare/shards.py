"""A suite run as shards, brought together (`python -m pytest_hpml merge`): each shard ran part
of the suite on its own runner and wrote its folder,

    SHARD_DIR/report.json    --hpml-report=SHARD_DIR/report.json
    SHARD_DIR/baselines/     --hpml-baselines=SHARD_DIR/baselines (a copy of the main folder,
                             into which the shard saved, when it did)

and one final job merges them: the shards' saves into the main baselines folder (the store's
own merge, baselines.merge_shards: the file holds what one save of the whole suite would have
written) and the shards' rows into one report per format, with every verdict as the shards
judged it. Shards of different machines or size profiles are refused unless asked: their
timings are not comparable."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_hpml.compare import baselines, engine
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.machine.fingerprint import machine_key
from pytest_hpml.report import files, tables
from pytest_hpml.results import Record

REPORT = "report.json"
BASELINES = "baselines"


class ShardError(ValueError):
    """Shards that cannot be merged; the message names the shard and what to do."""


@dataclass
class Shard:
    folder: Path
    fingerprint: dict[str, Any]
    profile: str
    records: list[Record]

    @property
    def machine(self) -> str:
        return machine_key(self.fingerprint) if self.fingerprint else "unknown machine"

    @property
    def baseline_files(self) -> list[Path]:
        return sorted(Path(self.folder, BASELINES).glob("*.json"))


def read_shard(folder: Path) -> Shard:
    """What one shard wrote: its JSON report (required) and its baselines folder (when it
    saved)."""
    folder = Path(folder)
    report = folder / REPORT
    if not folder.is_dir() or not report.is_file():
        raise ShardError(f"shard {folder}: no {REPORT} in it; run each shard with "
                         f"--hpml-report={folder}/{REPORT} (and --hpml-baselines={folder}/"
                         f"{BASELINES} to save)")
    try:
        data = json.loads(report.read_text(encoding="utf-8"))
        records = [Record.from_dict(r) for r in data["records"]]
        fingerprint, profile = data.get("fingerprint") or {}, str(data.get("profile"))
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError,
            AttributeError) as exc:
        raise ShardError(f"shard {folder}: {report} is not a pytest-hpml JSON report "
                         f"({exc!r})") from None
    return Shard(folder, dict(fingerprint), profile, records)


def check_alike(shards: list[Shard], allow_other_machine: bool) -> None:
    """Shards of one machine and size profile, or ShardError naming them."""
    groups: dict[tuple[str, str], list[str]] = {}
    for shard in shards:
        groups.setdefault((shard.machine, shard.profile), []).append(str(shard.folder))
    if len(groups) > 1 and not allow_other_machine:
        raise ShardError("the shards were not measured alike: " + "; ".join(
            f"{', '.join(names)} on {machine} (profile {profile})"
            for (machine, profile), names in groups.items())
            + ". Merge shards of one machine and profile, or give --allow-other-machine")


def merged_records(shards: list[Shard]) -> list[Record]:
    """Every shard's rows, in report order; a row in two shards is an error naming both."""
    seen: dict[str, Path] = {}
    records = []
    for shard in shards:
        for record in shard.records:
            if record.id in seen:
                raise ShardError(f"row {record.id} is in shard {seen[record.id]} and in shard "
                                 f"{shard.folder}: each test must run in one shard "
                                 "(--hpml-shard=I/N splits them)")
            seen[record.id] = shard.folder
            records.append(record)
    return tables.in_report_order(records)


@dataclass
class Merged:
    records: list[Record]
    baselines: list[baselines.ShardsMerged] = field(default_factory=list)
    written: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # "cannot write PATH: reason"

    @property
    def failures(self) -> list[str]:
        """One line per merged verdict that fails, as the run's comparison said it."""
        return [line for r in self.records for line in engine.failures(r, Rules())]


def combine(folders: list[Path], directory: Path, reports: list[Path],
          allow_other_machine: bool = False) -> Merged:
    """Merge the shards' saves into `directory` and their rows into each of `reports` (the
    format by suffix; each written on its own: one that cannot be written is a problem, and the
    others are written). ShardError or BaselineError, before anything is written, for shards
    that cannot be merged."""
    shards = [read_shard(f) for f in folders]
    check_alike(shards, allow_other_machine)
    merged = Merged(merged_records(shards))
    names = sorted({p.name for shard in shards for p in shard.baseline_files})
    for name in names:
        merged.baselines.append(baselines.merge_shards(
            Path(directory, name), [(str(s.folder), Path(s.folder, BASELINES, name),
                                     {r.id for r in s.records})
                                    for s in shards if Path(s.folder, BASELINES, name).exists()]))
    compared = any(r.verdicts for r in merged.records)
    first = shards[0]
    for path in reports:
        try:
            merged.written.append(files.write_report(
                path, merged.records, first.fingerprint, first.profile,
                "Comparison with baseline" if compared else None))
        except (OSError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            merged.problems.append(f"cannot write {path}: {reason}")
    return merged
