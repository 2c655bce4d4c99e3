"""How a save merges a run into the stored history of each metric: the last runs kept, the
processes each save added (its occasion), a new level where the run shows a change beyond what
the machine can detect (the accepted change, kept in the file), the history of metrics the run
did not produce kept, rows of tests that are gone dropped when asked."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from pytest_hpml.report.units import format_value
from pytest_hpml.results import Metric, Record, Verdict, measured_figures

#: Runs of history kept per metric (the last ones); --hpml-baseline-runs changes it. Ten saves
#: of three processes: enough occasions to learn the drift between them (compare/noise.py).
DEFAULT_KEEP = 30


#: Judges a run's metric against its stored form (a Verdict), for the levels of a save.
Judge = Callable[[Metric, Metric], Verdict | None]
#: A save whose run showed one of these (beyond what this machine can detect) starts a new level.
LEVEL_CHANGES = ("regressed", "improved")


@dataclass(frozen=True)
class MergePolicy:
    """How a save merges a run into the stored history."""

    keep: int = DEFAULT_KEEP  # runs of history kept per metric
    reset: bool = False  # restart the history of the saved rows (a hardware change)
    # A run that shows a change beyond what this machine can detect starts the metric's history
    # at the new level (an accepted change), keeping the old level and when it changed: a
    # history mixing both levels would blind the check for later changes.
    judge: Judge | None = None
    when: str = ""  # this save's date and time (ISO 8601; the store gives now by default)
    commit: str | None = None  # the commit this save measured (machine/revision.py)
    # The save's id in the file's saves table (compare/provenance.py), given by the store under
    # its lock: each history entry and accepted level names the save that made it.
    save_id: str = ""
    prune: frozenset[str] = frozenset()  # rows to drop (tests no longer in the suite)


def _process_values(metric: Metric) -> list[float]:
    return [v for v in [metric.value, *(metric.runs or [])] if math.isfinite(v)]


def _merged_metric(new: Metric, old: dict[str, Any] | None, policy: MergePolicy
                   ) -> tuple[dict[str, Any], str | None]:
    """The stored form of a measured metric: its latest value and samples with the history of
    its runs; what a comparison made of it (the verdict) and the values of this run's fresh
    processes (which join the history) are not stored as such. Also returns, for a new level,
    "before -> after" in words."""
    if old and old.get("seeded_from"):
        old = None  # another tool's value, measured another way: pytest-hpml's runs replace it
    level = None
    if old is not None and policy.judge is not None:
        verdict = new.verdict or policy.judge(new, Metric.from_dict(old))
        if verdict is not None and verdict.outcome in LEVEL_CHANGES:
            level = verdict
    accepted = list(old.get("accepted") or []) if old else []
    if level is not None:
        after = statistics.median(_process_values(new))
        accepted.append({"on": policy.when, "before": level.baseline, "after": after,
                         **({"save": policy.save_id} if policy.save_id else {})})
        old = None  # the history starts at the new level
    # Every process of this run is one run of history: the spread between them is the noise
    # the next comparison weighs a change against; this save is one occasion of the history.
    history = list(old.get("history") or [old["value"]]) if old else []
    fresh = [v for v in new.runs or [] if math.isfinite(v)]
    added = [*fresh, new.value]
    saves = _save_counts(old, len(history))
    ids = _save_ids(old, len(saves))
    history = (history + added)[-policy.keep:]
    saves, ids = _trimmed(saves + [len(added)], ids + [policy.save_id or None], len(history))
    relative_history = None
    relative_added = [v for v in new.relative_runs or [] if math.isfinite(v)]
    if new.relative is not None and len(relative_added) == len(fresh):
        # Relative to the yardstick: only while every run timed it, so that it stays the tail
        # of the history as measured, run for run; it restarts after a run that did not.
        relative = list(old.get("relative_history") or []) if old else []
        relative_history = (relative + relative_added + [new.relative])[-policy.keep:]
    stored = replace(new, verdict=None, runs=None, relative_runs=None, history=history,
                     relative_history=relative_history, history_saves=saves,
                     accepted=accepted or None)
    data = stored.to_dict()
    if any(ids):
        data["history_save_ids"] = ids
    said = None
    if level is not None:
        said = (f"{format_value(level.baseline, new.unit)} -> "
                f"{format_value(accepted[-1]['after'], new.unit)} ({level.outcome})")
    return data, said


def _save_counts(old: dict[str, Any] | None, stored: int) -> list[int]:
    """The values each earlier save added, oldest first; values of a file written before saves
    were counted make one occasion."""
    if not old or not stored:
        return []
    counts = [int(c) for c in old.get("history_saves") or []]
    unaccounted = stored - sum(counts)
    return ([unaccounted] if unaccounted > 0 else []) + counts


def _save_ids(old: dict[str, Any] | None, counted: int) -> list[str | None]:
    """The id of each earlier save (aligned with _save_counts); None where unknown: values of a
    file written before saves had ids, or before they were counted."""
    ids = list((old or {}).get("history_save_ids") or [])[-counted:] if counted else []
    return [None] * (counted - len(ids)) + ids


def _trimmed(counts: list[int], ids: list[str | None], kept: int
             ) -> tuple[list[int], list[str | None]]:
    """The save counts (and ids) of the last `kept` values: the oldest saves lose what was
    dropped, and a save left with none is dropped with its id."""
    excess = sum(counts) - kept
    out, out_ids = list(counts), list(ids)
    while excess > 0 and out:
        take = min(excess, out[0])
        out[0] -= take
        excess -= take
        if out[0] == 0:
            out.pop(0)
            out_ids.pop(0)
    return out, out_ids


def merge(existing: dict[str, dict[str, Any]], records: list[Record],
          policy: MergePolicy = MergePolicy()) -> tuple[dict[str, dict[str, Any]], list[str],
                                                        list[str]]:
    """The stored records with `records` merged in: each measured metric's latest value and
    samples replace the old ones and its value joins the history (the last `keep` runs; with
    reset, the history restarts; after a change beyond the noise, it starts at the new level).
    Metrics of a row that this run did not produce keep their history; rows not in `records`
    are kept as they were, unless pruned. Returns the merged records, the metrics left out
    because they are not finite numbers, and one line per new level."""
    merged = {k: v for k, v in existing.items() if k not in policy.prune}
    skipped, levels = [], []
    for record in records:
        stored = [] if policy.reset else existing.get(record.id, {}).get("metrics", [])
        old = {m["name"]: m for m in stored}
        data = record.to_dict()
        kept, not_numbers = measured_figures(record)
        skipped += [f"{record.id} {m.name} = {m.value}" for m in not_numbers]
        data["metrics"] = []
        for m in kept:
            metric, level = _merged_metric(m, old.pop(m.name, None), policy)
            data["metrics"].append(metric)
            if level:
                levels.append(f"{record.id} {m.name}: {level}")
        # What this run did not produce (a save of part of a row) keeps its history.
        data["metrics"] += [m for m in stored if m["name"] in old]
        data.pop("expected_missing", None)
        merged[record.id] = data
    return merged, skipped, levels
