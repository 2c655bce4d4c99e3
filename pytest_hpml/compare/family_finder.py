"""A comparison's families found (a part of the compare stage, used by the engine): per test and
metric, the rows that record the metric against evidence, and what they show together (their
spread between processes and their changes, compare/families.py), with each row's share kept
across the judging passes of one comparison (FamilyMemo), whose rounds of confirmation change
the values of a few rows."""

from __future__ import annotations

from dataclasses import dataclass, field

from pytest_hpml.compare import arrays
from pytest_hpml.compare.evidence import series
from pytest_hpml.compare.families import MIN_POOLED_ROWS, Family, RowShare, pooled, row_share
from pytest_hpml.compare.stored import Stored
from pytest_hpml.results import Metric, Record, Replicates

#: A test's families, by (test, metric name).
Families = dict[tuple[str, str], Family]
#: One row of a family as a pass found it: its record, its metric and the metric's evidence
#: (an arrays.Row), with its values (compare/arrays.py judges the family from them).
Ref = tuple[tuple[Record, Metric, Stored], Replicates]
#: A family's pooled shares by series label: the shares, and each row's place among them.
Pooled = dict[str, tuple[list[RowShare], dict[tuple[str, str], int]]]


@dataclass
class _Pass:
    """What one pass found: of which list of records (and how many), each family's rows and
    pooled shares, and the families."""

    records: list[Record]
    count: int
    rows: dict[tuple[str, str], list[Ref]] = field(default_factory=dict)
    shares: dict[tuple[str, str], Pooled] = field(default_factory=dict)
    found: Families = field(default_factory=dict)

    def of(self, records: list[Record]) -> bool:
        """Whether this pass found the families of `records` (the list itself, as long)."""
        return self.records is records and self.count == len(records)


class FamilyMemo(dict[tuple[str, str], tuple[Replicates, Stored, dict[str, RowShare]]]):
    """Each row's shares of its families (by series label), by (row id, metric name), with the
    values and the evidence they were taken from: kept across the judging passes of one
    comparison, whose rounds of confirmation change the values of a few rows (a 10 000-row
    sweep's families took 0.09 s to find again after each round); and what the last pass
    found, so that the next one, of the same records against the same evidence, takes again
    only the rows a round measured (a round's judging 0.035-0.043 s -> 0.015-0.019 s). A
    plain dict keeps the rows' shares only."""

    def __init__(self) -> None:
        super().__init__()
        self.last: _Pass | None = None


def families(records: list[Record], bases: dict[str, dict[str, Stored]],
             memo: dict | None = None) -> Families:
    """The families of `records` (each row's evidence in `bases`, by row id): per test and
    metric, the rows that record the metric against evidence, and the spread between processes
    they show together where they are MIN_POOLED_ROWS or more. `memo`: the rows' shares found
    before (a row whose values or evidence changed since is taken again); a FamilyMemo also
    keeps the families, found again from the rows whose values changed."""
    if isinstance(memo, FamilyMemo) and memo.last is not None:
        again = _found_again(memo, memo.last, records, bases)
        if again is not None:
            return again
    memo = {} if memo is None else memo
    found_pass = _Pass(records, len(records))
    refs: dict[tuple[str, str], list[Ref]] = {}
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
                key = (record.test or record.id, m.name)
                now = kept[0] if kept and kept[1] is old else record.values_of(m.name)
                refs.setdefault(key, []).append(((record, m, old), now))
    found: Families = {}
    for key, family_rows in refs.items():
        if len(family_rows) < 2:
            continue
        rows = [(record.id, m.name, now, old) for (record, m, old), now in family_rows]
        by_label: Pooled = {}
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
                    shares, places = by_label.setdefault(label, ([], {}))
                    places[rid, name] = len(shares)
                    shares.append(share)
        found[key] = _family(len(rows), by_label)
        found_pass.rows[key], found_pass.shares[key] = family_rows, by_label
    found_pass.found = found
    if isinstance(memo, FamilyMemo):
        memo.last = found_pass
    return found


def _family(rows: int, by_label: Pooled) -> Family:
    return Family(rows, {label: spread for label, (shares, _) in by_label.items()
                         if (spread := pooled(shares)) is not None})


def _found_again(memo: FamilyMemo, last: _Pass, records: list[Record],
                 bases: dict[str, dict[str, Stored]]) -> Families | None:
    """The families of the records the last pass found them of, where only the values of
    some rows changed (fresh processes measured them): those rows' shares taken again and
    put in their places, each family pooled again where one of its rows changed. None where
    that cannot tell: other records, evidence that changed (measured again at a git ref), a
    row whose series changed."""
    if not last.of(records):
        return None
    found: Families = {}
    for key, refs in last.rows.items():
        changed = []
        for i, (row, before) in enumerate(refs):
            record, m, old = row
            if bases.get(record.id, {}).get(m.name) is not old:
                return None
            now = record.replicates.get(m.name)  # values change by fresh processes only
            if now is not None and now is not before:
                refs[i] = (row, now)
                if not _kept(memo, record.id, m.name, now, old):
                    changed.append((record.id, m.name, now, old))
        by_label = last.shares[key]
        if changed and len(refs) >= MIN_POOLED_ROWS:
            rest = _share_as_arrays(memo, changed) if arrays.worth_it(len(refs)) else changed
            for row in rest:
                _share(memo, *row)
            for rid, name, _, _ in changed:
                shares = memo[rid, name][2]
                if shares.keys() != {label for label, (_, places) in by_label.items()
                                     if (rid, name) in places}:
                    return None  # the row's series are not those pooled before
                for label, share in shares.items():
                    pooled_shares, places = by_label[label]
                    pooled_shares[places[rid, name]] = share
            found[key] = _family(len(refs), by_label)
        else:
            found[key] = last.found[key]  # no row's values moved (or too few rows to pool)
    last.found = found
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


def rows_found(memo: dict | None, records: list[Record]) -> dict[tuple[str, str], list[Ref]]:
    """Each family's rows with their values, as the last pass found them of `records` (none
    where it found them of other records, or `memo` keeps no pass)."""
    last = getattr(memo, "last", None)
    return last.rows if last is not None and last.of(records) else {}
