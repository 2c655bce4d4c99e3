"""Which save each stored value came from: the baseline file's table of saves (when each was
made and the commit it measured) and the references to it.

    "saves": {"<save id>": {"on": "2026-05-01T12:00:00+00:00", "commit": "<40 hex>" | null}}

A measured metric's `history_save_ids` names the save of each entry of its `history_saves`
(null for values saved before saves had ids), and an accepted level's `save` names the save
that accepted it. A save id is the save's time in base 36 seconds (six characters until 2038),
moved on by a second where a save of the same second holds it: short, unique within the file,
and in time order. Entries no metric refers to any more are dropped at each save, so the table
stays as small as the history it explains. Files written before the table existed have none:
their saves' dates and commits are unknown, and read as such.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable
from functools import lru_cache
from typing import Any

from pytest_hpml.machine.revision import full_sha

DIGITS = "0123456789abcdefghijklmnopqrstuvwxyz"
#: Saves made within this many seconds of an occasion's first save are of that occasion: the
#: machine's speed has not yet moved on. Five saves made minutes apart on this machine agreed
#: within 0-2 %, and the compare an hour later read the same code 10-20 % slower: a drift
#: learned from such saves is the drift of minutes, not of the hours between pushes.
OCCASION_SECONDS = 3600


def utc_now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def parse_time(text: str) -> datetime.datetime | None:
    """An ISO 8601 date and time (a trailing Z read as UTC; no zone taken as UTC); None when
    `text` is not one."""
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (TypeError, ValueError):
        return None
    return when if when.tzinfo else when.replace(tzinfo=datetime.timezone.utc)


def _base36(number: int) -> str:
    out = ""
    while True:
        number, digit = divmod(number, 36)
        out = DIGITS[digit] + out
        if not number:
            return out


def new_save_id(when: str, taken: Iterable[str]) -> str:
    """The id of a save made at `when` (ISO 8601), unlike any in `taken`."""
    moment = parse_time(when) or datetime.datetime.now(datetime.timezone.utc)
    seconds = max(0, int(moment.timestamp()))
    taken = set(taken)
    while _base36(seconds) in taken:
        seconds += 1
    return _base36(seconds)


def save_seconds(save_id: str | None) -> int | None:
    """When the save `save_id` was made, in seconds since 1970 (its id is that time, moved on by
    a second or two where a save of the same second held it); None where unknown."""
    if not save_id:
        return None
    try:
        return int(save_id, 36)
    except ValueError:
        return None


def occasions_in_time(ids: list[str | None] | None) -> list[int] | None:
    """How many consecutive saves of `ids` (a metric's history_save_ids, oldest first) each
    occasion holds: a save made within OCCASION_SECONDS of its occasion's first save joins it;
    a save of unknown time is an occasion of its own. None where every save is its own."""
    if not ids:
        return None
    found = _occasions_in_time(tuple(ids))
    return list(found) if found else None


@lru_cache(maxsize=1024)
def _occasions_in_time(ids: tuple[str | None, ...]) -> tuple[int, ...] | None:
    # Cached: the rows of a sweep share their saves (10 000 rows asked it of the same ids).
    counts: list[int] = []
    first: int | None = None
    for save_id in ids:
        at = save_seconds(save_id)
        if counts and at is not None and first is not None and \
                0 <= at - first < OCCASION_SECONDS:
            counts[-1] += 1
        else:
            counts.append(1)
            first = at
    return tuple(counts) if len(counts) < len(ids) else None


def entry(when: str, commit: str | None) -> dict[str, Any]:
    return {"on": when, "commit": full_sha(commit)}


def referenced(records: Iterable[dict[str, Any]], among: set[str] | None = None) -> set[str]:
    """The save ids the stored metrics of `records` refer to; where every id of `among` is
    found, the rows left are not read (a save's table is found whole in its first rows, and
    a 10 000-row file walked whole for it)."""
    found: set[str] = set()
    for record in records:
        for m in record.get("metrics", []):
            found.update(i for i in m.get("history_save_ids") or [] if i)
            found.update(a["save"] for a in m.get("accepted") or [] if a.get("save"))
        if among is not None and among <= found:
            break
    return found


def kept(table: dict[str, Any], records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """The table less the saves no metric refers to, oldest first."""
    used = referenced(records, set(table))
    return {k: table[k] for k in sorted(table, key=lambda k: (str(table[k].get("on")), k))
            if k in used}


def check_table(table: Any) -> dict[str, dict[str, Any]]:
    """The saves table of a document; ValueError says what is wrong with it."""
    if table is None:
        return {}
    if not isinstance(table, dict):
        raise ValueError(f"saves is {type(table).__name__}, not an object of saves by id")
    for key, save in table.items():
        if not key or not isinstance(save, dict):
            raise ValueError(f"save {key!r} is {save!r}, not {{'on': date, 'commit': sha}}")
        if not isinstance(save.get("on"), str) or parse_time(save["on"]) is None:
            raise ValueError(f"save {key!r}: on is {save.get('on')!r}, not an ISO 8601 date")
        commit = save.get("commit")
        if commit is not None and (not isinstance(commit, str) or full_sha(commit) != commit):
            raise ValueError(f"save {key!r}: commit is {commit!r}, not a full commit hash "
                             "(40 hex digits) or null")
    return table


def check_metric(m: dict[str, Any], table: dict[str, Any]) -> None:
    """A stored metric's references to saves: aligned with its history_saves, and each in
    the table; ValueError says what is wrong (the caller names the metric)."""
    ids = m.get("history_save_ids")
    if ids is not None:
        counts = m.get("history_saves")
        if not isinstance(ids, list) or not isinstance(counts, list) or len(ids) != len(counts):
            raise ValueError(f"history_save_ids holds {ids!r}, not one save id (or null) for "
                             f"each of history_saves {counts!r}")
        for i in ids:
            if i is not None and (not isinstance(i, str) or i not in table):
                raise ValueError(f"history_save_ids names save {i!r}, which the file's saves "
                                 "table does not hold")
    for level in m.get("accepted") or []:
        save = level.get("save")
        if save is not None and (not isinstance(save, str) or save not in table):
            raise ValueError(f"an accepted level names save {save!r}, which the file's saves "
                             "table does not hold")


def renamed(record: dict[str, Any], old: str, new: str) -> dict[str, Any]:
    """A copy of a stored record whose metrics name save `new` where they named `old` (two
    files' saves of the same second that a merge brings together)."""
    metrics = []
    for m in record.get("metrics", []):
        m = dict(m)
        if m.get("history_save_ids"):
            m["history_save_ids"] = [new if i == old else i for i in m["history_save_ids"]]
        if m.get("accepted"):
            m["accepted"] = [{**a, "save": new} if a.get("save") == old else a
                             for a in m["accepted"]]
        metrics.append(m)
    return {**record, "metrics": metrics}
