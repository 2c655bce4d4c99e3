"""A comparison's families found (a part of the compare stage, used by the engine): per test and
metric, the rows that record the metric against evidence, and what they show together (their
spread between processes and their changes, compare/families.py), with each row's share kept
across the judging passes of one comparison (FamilyMemo), whose rounds of confirmation change
the values of a few rows."""

from __future__ import annotations

from pytest_hpml.compare import arrays
from pytest_hpml.compare.evidence import series
from pytest_hpml.compare.families import MIN_POOLED_ROWS, Family, RowShare, pooled, row_share
from pytest_hpml.compare.stored import Stored
from pytest_hpml.results import Record, Replicates

#: A test's families, by (test, metric name).
Families = dict[tuple[str, str], Family]
#: Each row's shares of its families (by series label), by (row id, metric name), with the
#: values and the evidence they were taken from: kept across the judging passes of one
#: comparison, whose rounds of confirmation change the values of a few rows (a 10 000-row
#: sweep's families took 0.09 s to find again after each round).
FamilyMemo = dict[tuple[str, str], tuple[Replicates, Stored, dict[str, RowShare]]]


def families(records: list[Record], bases: dict[str, dict[str, Stored]],
             memo: FamilyMemo | None = None) -> Families:
    """The families of `records` (each row's evidence in `bases`, by row id): per test and
    metric, the rows that record the metric against evidence, and the spread between processes
    they show together where they are MIN_POOLED_ROWS or more. `memo`: the rows' shares found
    before (a row whose values or evidence changed since is taken again)."""
    members: dict[tuple[str, str], list[arrays.Member]] = {}
    memo = {} if memo is None else memo
    for record in records:
        base = bases.get(record.id, {})
        for m in record.metrics:
            old = base.get(m.name)
            # A row whose test is unknown (a report written before rows named it) is a family
            # of its own.
            if m.compared and not m.exact and old is not None and not old.exact:
                # Values no fresh process added to are the test's own, as the memo holds them
                # (a round's pass asked 10 000 rows for them again).
                kept = None if m.name in record.replicates else memo.get((record.id, m.name))
                members.setdefault((record.test or record.id, m.name), []).append(
                    (record.id, m.name, kept[0] if kept and kept[1] is old
                     else record.values_of(m.name), old))
    found: Families = {}
    for key, rows in members.items():
        if len(rows) < 2:
            continue
        by_label: dict[str, list[RowShare]] = {}
        # The rows whose shares the memo holds are asked once (a round of confirmation
        # changes a few rows of a 10 000-row sweep).
        fresh = [row for row in rows if not _kept(memo, *row)]
        if fresh and arrays.worth_it(len(rows)):
            fresh = _share_as_arrays(memo, fresh)
        if len(rows) >= MIN_POOLED_ROWS:
            for row in fresh:  # those the arrays did not take: one by one
                _share(memo, *row)
            for rid, name, _, _ in rows:
                for label, share in memo[rid, name][2].items():
                    by_label.setdefault(label, []).append(share)
        spreads = {label: spread for label, shares in by_label.items()
                   if (spread := pooled(shares)) is not None}
        found[key] = Family(len(rows), spreads)
    return found


def _share_as_arrays(memo: FamilyMemo, rows: list[arrays.Member]) -> list[arrays.Member]:
    """Into `memo`, the shares of the ordinary rows of `rows` (a large family's, which `memo`
    does not hold), taken together (compare/arrays.py); returns the others, for _share."""
    taken = arrays.shares(rows)
    for rid, name, now, old in rows:
        if (rid, name) in taken:
            memo[rid, name] = (now, old, {"": taken[rid, name]})
    return [row for row in rows if row[:2] not in taken]


def _kept(memo: FamilyMemo, rid: str, name: str, now: Replicates, old: Stored) -> bool:
    """Whether `memo` holds the row's shares of these values and this evidence."""
    kept = memo.get((rid, name))
    return kept is not None and kept[1] is old and (kept[0] is now or kept[0] == now)


def _share(memo: FamilyMemo, rid: str, name: str, now: Replicates, old: Stored) -> None:
    """Into `memo`, a row's shares of its families, by series label."""
    memo[rid, name] = (now, old, {e.label: row_share(e.history, e.saves, e.now)
                                  for e in series(now, old)})
