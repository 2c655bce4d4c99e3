"""How a save merges a run into the stored history of each metric: the last runs kept, the
processes each save added (its occasion), a new level where the run shows a change beyond what
the machine can detect (the accepted change, kept in the file), the history of metrics the run
did not produce kept, rows of tests that are gone dropped when asked. A stored metric keeps
what verdicts use (the runs' values to 7 significant digits, the latest run's sample count and
the notch of its median), not every sample."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_hpml.compare.stored import Stored
from pytest_hpml.measure.stats import deciles, median_uncertainty
from pytest_hpml.report.units import conversion, format_change
from pytest_hpml.results import Metric, Record, Replicates, Verdict, measured_figures

#: Runs of history kept per metric (the last ones); --hpml-baseline-runs changes it. Ten saves
#: of three processes: enough occasions to learn the drift between them (compare/noise.py).
DEFAULT_KEEP = 30
#: A save whose run showed one of these (beyond what this machine can detect) starts a new
#: level; the verdicts come from the comparison engine, with the rule that a figure derived
#: from a timing follows its timing, so a time and its bandwidth start a new level together.
LEVEL_CHANGES = ("regressed", "improved")
#: How the line of a move that starts no new level ends (the same code, or a return to the
#: level before the last accepted change): the history keeps both levels.
_KEPT = "; kept in the history, no new level"


@dataclass(frozen=True)
class MergePolicy:
    """How a save merges a run into the stored history."""

    keep: int = DEFAULT_KEEP  # runs of history kept per metric
    reset: bool = False  # restart the history of the saved rows (a hardware change)
    when: str = ""  # this save's date and time (ISO 8601; the store gives now by default)
    commit: str | None = None  # the commit this save measured (machine/revision.py)
    # The save's id in the file's saves table (compare/provenance.py), given by the store under
    # its lock: each history entry and accepted level names the save that made it.
    save_id: str = ""
    prune: frozenset[str] = frozenset()  # rows to drop (tests no longer in the suite)
    # Where the values came from when another tool measured them (a pytest-benchmark run,
    # compare/seed.py): said by every verdict that rests on them, replaced by the next save.
    seeded_from: str | None = None
    # Whether `commit` names the code measured (a clean working tree), and the commit of each
    # save in the file (save id -> commit): a change seen at the commit of the save before it
    # is not the code's, and starts no new level.
    clean: bool = False
    commits: Mapping[str, str | None] = field(default_factory=dict)


def _earlier_level(old: Stored, value: float, detectable: float | None) -> dict | None:
    """The last accepted change when `value` is back at the level before it, within the
    change this machine can detect; else None."""
    last = (old.accepted or [None])[-1]
    if not last or not detectable or not (value > 0 and last.get("before", 0) > 0):
        return None
    return last if abs(math.log(value / last["before"])) <= math.log1p(detectable) else None


def _same_code(old: Stored, policy: MergePolicy) -> bool:
    """Whether this save measured the code that the stored level's latest save measured: the
    same commit, from a clean tree."""
    last = (old.history_save_ids or [None])[-1]
    return bool(policy.clean and policy.commit and last
                and policy.commits.get(last) == policy.commit)


def _merged_metric(new: Metric, values: Replicates, verdict: Verdict | None,
                   old: Stored | None, policy: MergePolicy
                   ) -> tuple[dict[str, Any], str | None, bool]:
    """The stored form of a measured metric (the dict Stored.to_dict writes): its latest run
    with the history of its runs; the values of every process of this run join the history as
    one occasion. A run whose verdict (regressed or improved beyond what this machine can
    detect) says the metric moved starts its history at the new level, keeping the old level
    and when it changed: a history mixing both levels would blind the check for later changes.
    Also returns, for a new level, a restarted history or a move kept in the history, what
    happened in words, and whether the history was kept through a move (no new level)."""
    if old is not None and old.seeded_from:
        old = None  # another tool's value, measured another way: pytest-hpml's runs replace it
    said, kept = None, False
    if old is not None:
        factor = conversion(old.unit, new.unit)
        flipped = old.better and new.better and old.better != new.better
        if factor is None or flipped:
            what = (f"unit {old.unit or 'none'} -> {new.unit or 'none'}" if factor is None
                    else f"better {old.better} -> {new.better}")
            said, old = f"history restarted ({what})", None
        elif factor != 1.0:
            old = old.scaled(factor, new.unit)  # a latency saved in ms, now in s
    accepted = list(old.accepted or []) if old else []
    if old is not None and verdict is not None and verdict.outcome in LEVEL_CHANGES:
        after = values.value
        before = verdict.baseline if verdict.baseline is not None else old.reference
        said = f"{format_change(before, after, new.unit)} ({verdict.outcome})"
        if _same_code(old, policy):
            # The code did not change, the level did: the machine's drift or the benchmark's
            # modes (json.dumps at 0.8 ms in one process, 1.6 ms in the next). Kept in the
            # history, where the next comparison weighs it as the noise it is; a new level
            # would drop the other mode and fail the next process that lands in it.
            said += f" at the commit of the save before ({str(policy.commit)[:12]}){_KEPT}"
            kept = True
        elif (earlier := _earlier_level(old, after, verdict.mdc)) is not None:
            # Back where the metric was before its last accepted change: a mode the benchmark
            # returns to (saves of different commits, each landing in one mode, would flip the
            # level at every save), or a revert, which its pull request's comparison judged.
            said += (f", back at the level it held before the change accepted on "
                     f"{str(earlier.get('on', '?'))[:10]}: a mode it returns to{_KEPT}")
            kept = True
        else:
            accepted.append({"on": policy.when, "before": before, "after": after,
                             **({"save": policy.save_id} if policy.save_id else {})})
            old = None  # the history starts at the new level
    # Every process of this run is one run of history: the spread between them is the noise
    # the next comparison weighs a change against; this save is one occasion of the history.
    # Rounded as they join: the stored values were rounded when they did (a 10 000-row save
    # rounded its whole history again, a twentieth of its time).
    added = [_kept_value(v) for v in values.values if math.isfinite(v)]
    history = list(old.runs) if old else []
    saves = _save_counts(old, len(history))
    ids = _save_ids(old, len(saves))
    history = (history + added)[-policy.keep:]
    saves, ids = _trimmed(saves + [len(added)], ids + [policy.save_id or None], len(history))
    def tail(now: tuple[float, ...] | None, kept: list[float] | None) -> list[float] | None:
        """A history relative to the yardstick or to the compute pace: only while every run
        timed it, so that it stays the tail of the history as measured, run for run; it
        restarts after a run that did not."""
        if now is None or len(now) != len(values.values):
            return None
        added_now = [_kept_value(r) for v, r in zip(values.values, now, strict=True)
                     if math.isfinite(v)]
        return ((list(kept or []) if old else []) + added_now)[-policy.keep:]

    relative_history = tail(values.relative, old.relative_history if old else None)
    paced_history = tail(values.paced, old.paced_history if old else None)
    tenths = deciles(new.samples or [])
    # Stored's fields in its order, as Stored.to_dict writes them (no None, `exact` only where
    # true), made as the dict the file holds: a Stored built a row only to be turned into its
    # dict was a tenth of a 10 000-row save. The file's rules (Stored's own among them) are
    # checked on the merged document before it is written (baselines._write_checked).
    fields = (("name", new.name), ("value", _kept_value(new.value)), ("unit", new.unit),
              ("better", new.better), ("exact", new.exact or None),
              ("tolerance", new.tolerance), ("derived_from", new.derived_from),
              ("iqr", _kept_optional(new.iqr)), ("yardstick", _kept_optional(new.yardstick)),
              ("compute_yardstick", _kept_optional(new.compute_yardstick)),
              ("n", len(new.samples) if new.samples else None),
              ("notch", _kept_value(median_uncertainty(new.samples or [])) or None),
              ("p10", _kept_optional(tenths[0]) if tenths else None),
              ("p90", _kept_optional(tenths[1]) if tenths else None),
              ("history", history), ("relative_history", relative_history),
              ("paced_history", paced_history), ("history_saves", saves),
              ("history_save_ids", ids if any(ids) else None),
              ("accepted", [{**a, "before": _kept_value(a["before"]),
                             "after": _kept_value(a["after"])} for a in accepted] or None),
              ("seeded_from", policy.seeded_from))
    return {k: v for k, v in fields if v is not None}, said, kept


#: Significant digits a baseline keeps of a run's value: a millionth is far below any noise a
#: verdict weighs, and the file stays small.
DIGITS = 7


def _kept_value(value: float) -> float:
    return float(f"{value:.{DIGITS}g}")


def _kept_optional(value: float | None) -> float | None:
    return None if value is None else _kept_value(value)


def _save_counts(old: Stored | None, stored: int) -> list[int]:
    """The values each earlier save added, oldest first; values of a file written before saves
    were counted make one occasion."""
    if not old or not stored:
        return []
    counts = [int(c) for c in old.history_saves or []]
    unaccounted = stored - sum(counts)
    return ([unaccounted] if unaccounted > 0 else []) + counts


def _save_ids(old: Stored | None, counted: int) -> list[str | None]:
    """The id of each earlier save (aligned with _save_counts); None where unknown: values of a
    file written before saves had ids, or before they were counted."""
    ids = list((old.history_save_ids if old else None) or [])[-counted:] if counted else []
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


def extend(existing: dict[str, dict[str, Any]], records: list[Record],
          policy: MergePolicy = MergePolicy(),
          checked: Callable[[str], dict[str, Stored]] | None = None
          ) -> tuple[dict[str, dict[str, Any]], list[str], list[str], list[str]]:
    """The stored records with `records` merged in: each measured metric's latest value and
    samples replace the old ones and the values of its processes join the history (the last
    `keep` runs; with reset, the history restarts; after a change its verdict says is beyond
    the noise, it starts at the new level). Metrics of a row that this run did not produce keep
    their history; rows not in `records` are kept as they were, unless pruned. Returns the
    merged records, the metrics left out because they are not finite numbers, one line per new
    level or restarted history, and one per move kept in the history (no new level).
    `checked(row id)`: the row's measured metrics as a load checked them (Baseline.metrics_for),
    so that they are not built again."""
    merged = {k: v for k, v in existing.items() if k not in policy.prune}
    skipped: list[str] = []
    levels: list[str] = []
    moves_kept: list[str] = []
    for record in records:
        stored = [] if policy.reset else existing.get(record.id, {}).get("metrics", [])
        old = {m["name"]: m for m in stored}
        known = checked(record.id) if checked is not None and not policy.reset else {}
        data = record.identity()  # what a comparison made of the run is not stored as such
        kept, not_numbers = measured_figures(record)
        skipped += [f"{record.id} {m.name} = {m.value}" for m in not_numbers]
        for m in kept:
            replicates = record.values_of(m.name)
            values = replicates.values
            if not all(map(math.isfinite, values)):
                # A process that measured no number makes the level unknown: a median of the
                # others would store a level this run did not establish.
                odd = sum(not math.isfinite(v) for v in values)
                skipped.append(f"{record.id} {m.name} = "
                               f"{', '.join(format(v, 'g') for v in values)} ({odd} of "
                               f"{len(values)} processes measured no number)")
                continue
            before = old.pop(m.name, None)
            metric, said, kept_move = _merged_metric(
                m, replicates, record.verdict(m.name),
                known.get(m.name) or (Stored.from_dict(before) if before else None), policy)
            data["metrics"].append(metric)
            if said:
                (moves_kept if kept_move else levels).append(f"{record.id} {m.name}: {said}")
        # What this run did not produce (a save of part of a row) keeps its history.
        data["metrics"] += [m for m in stored if m["name"] in old]
        merged[record.id] = data
    return merged, skipped, levels, moves_kept
