"""The comparison engine: every path that judges a metric goes through here with one set of
rules. A comparison with the stored baseline (--hpml-compare), with the code at a git ref
measured now (--hpml-compare-ref), of two report files (`python -m pytest_hpml compare`) and a
save deciding whether a change starts a new level differ only in the evidence they supply (a
mapping of Stored metrics per row) and in how they measure again; the engine

- folds the values of fresh processes into a row's metrics (merge: the one place, as
  torch.utils.benchmark's Measurement.merge is the one place replicates are merged);
- checks that the evidence measures the same thing: units converted where they are
  commensurable (5 ms and 0.010 s), refused where they are not (s and B/s), a direction that
  flipped refused (`incomparable`), a measured figure turned into a setting `missing`;
- judges each metric (verdicts.judge_metric), the rows of a test that record the same metric
  as one family (compare/families.py: a sweep's rows share the test's alpha and their spread
  between processes), then lets a metric derived from a timing follow
  its timing's verdict, and marks what the evidence has and the row lacks `missing`;
- says the failing verdicts in one line each (failures); compare/settling.py settles
  suspected changes by measuring again, within a budget of processes and seconds.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import replace

from pytest_hpml.compare import arrays, level_screen
from pytest_hpml.compare.bulk import collector_paused
from pytest_hpml.compare.family_finder import Families, FamilyMemo, families, rows_found
from pytest_hpml.compare.noise import Advice
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules, judge_metric
from pytest_hpml.report.units import conversion, format_change, format_value
from pytest_hpml.results import Metric, Record, Replicates, Verdict

#: Verdicts that fail a comparison (`missing` unless the row expects it).
FAILING = ("regressed", "missing", "incomparable")


# -- the values of fresh processes ----------------------------------------------------------------

def merge(before: Replicates, fresh: Iterable[Metric]) -> Replicates:
    """`before` (the test's own process first, then earlier fresh ones) with the values of
    further fresh processes appended, in the order they ran. Relative values are kept only
    while every process timed the yardstick: a series with holes would not be the values as
    measured, run for run; so are values relative to the compute pace."""
    fresh = list(fresh)
    values = (*before.values, *(m.value for m in fresh))

    def joined(kept: tuple[float, ...] | None, added: list[float | None]
               ) -> tuple[float, ...] | None:
        return None if kept is None or None in added else (*kept, *added)  # type: ignore

    return Replicates(values, joined(before.relative, [m.relative for m in fresh]),
                      joined(before.paced, [m.paced for m in fresh]))


def processes_of(values: Iterable[float]) -> Replicates:
    """Values of processes measured together, the first the test's own (a save's, read back
    from its history), as one run's replicates."""
    return Replicates(tuple(values))


def add_processes(records: list[Record], processes: list[list[Record]]) -> None:
    """Fold what fresh processes measured (each a list of records) into `records`: every
    measured metric of a row gets the values of the same metric of the same row."""
    # Indexed by row id once: a sweep of 10k rows matched by scanning took minutes.
    by_id: dict[str, dict[str, list[Metric]]] = {}
    for made in processes:
        for other in made:
            found_here = by_id.setdefault(other.id, {})
            for m in other.metrics:
                found_here.setdefault(m.name, []).append(m)
    for record in records:
        found = by_id.get(record.id, {})
        for m in record.metrics:
            if m.compared and found.get(m.name):
                record.replicates[m.name] = merge(record.values_of(m.name), found[m.name])


# -- evidence ------------------------------------------------------------------------------------

class Source:
    """Evidence a run is judged against: the stored metrics of each row, what the evidence is
    called, whether it was measured on this run's occasion, and how to narrow a blind spot on
    this path."""

    label = "the baseline"
    #: Whether the evidence was measured on this run's occasion, in turns with it: no drift
    #: between them is assumed, and modes as narrow as one occasion's are told apart
    #: (compare/modes.py). Otherwise the run's rules hold (the drift assumed until learned).
    one_occasion = False
    advice: Advice = Advice()

    def stored(self, record_id: str) -> dict[str, Stored]:
        raise NotImplementedError

    def rules(self, rules: Rules) -> Rules:
        return replace(rules, drift=0.0, one_occasion=True) if self.one_occasion else rules


def _same_quantity(current: Metric, base: Stored) -> tuple[Stored | None, Verdict | None, str]:
    """The evidence in the current metric's unit, or the verdict that refuses it; and what the
    conversion was, in words."""
    factor = conversion(base.unit, current.unit)
    if factor is None:
        return None, Verdict(
            "incomparable", unit=current.unit, baseline=base.reference,
            basis=f"the unit changed: {base.unit or 'no unit'} in the baseline, "
                  f"{current.unit or 'no unit'} now, which measure different things; record "
                  "the new figure under a new name, or accept it (a save with "
                  "--hpml-reset-baseline restarts its history)"), ""
    if base.better is not None and current.better is not None and \
            base.better != current.better:
        return None, Verdict(
            "incomparable", unit=current.unit, baseline=base.reference,
            basis=f"better was {base.better!r} in the baseline and is {current.better!r} now: "
                  "a change cannot be judged across a flipped direction; record the new "
                  "figure under a new name, or accept it (a save with --hpml-reset-baseline)"
        ), ""
    if factor == 1.0:
        return base, None, ""
    return base.scaled(factor, current.unit), None, (
        f"the baseline's values converted from {base.unit} to {current.unit}")


def _noted(verdict: Verdict | None, note: str) -> Verdict | None:
    """The verdict with what the evidence's conversion was (`note`), where there was one."""
    return replace(verdict, basis=f"{verdict.basis}; {note}") if verdict and note else verdict


def judge_rows(records: list[Record], stored_of: Callable[[str], dict[str, Stored]],
               rules: Rules, can_confirm: int = 0, advice: Advice | None = None,
               said: str = "", levels_only: bool = False,
               rows: list[Record] | None = None, memo: FamilyMemo | None = None) -> None:
    """judge() every row of `rows` (default: all of `records`) against `stored_of(row id)`,
    each test's rows that record the same metric as one family (of all its `records`).
    levels_only (a save's question: which metrics start a new level?): a metric that cannot
    is given the screen's verdict (compare/level_screen.py), not weighed in full (the screen
    answers as a judgement that confirms nothing would: not with can_confirm); the families
    are found only where some metric is. `memo`: one comparison's, kept across its passes
    (families)."""
    with collector_paused(freeze=True):
        _judge_rows(records, records if rows is None else rows, stored_of, rules, can_confirm,
                    advice, said, levels_only, memo)


def _judge_rows(records: list[Record], rows: list[Record],
                stored_of: Callable[[str], dict[str, Stored]], rules: Rules, can_confirm: int,
                advice: Advice | None, said: str, levels_only: bool,
                memo: FamilyMemo | None) -> None:
    bases = {record.id: stored_of(record.id) for record in records}
    memo = FamilyMemo() if memo is None else memo  # the families' rows, for the arrays
    screened = levels_only and not can_confirm
    # The rows of a family judged as arrays skip the screen: the arrays answer for less than
    # the screen's Python (0.13 s of a 10 000-row save).
    skipped = _array_families(records) if screened else set()
    decided = {record.id: _screen(record, bases[record.id], rules, skipped)
               for record in rows} if screened else {}
    weighed = not screened or any(
        m.compared and m.name in bases[r.id] and m.name not in decided[r.id]
        for r in rows for m in r.metrics)
    # A family's floor and alpha come from all its rows, screened or not, judged now or not.
    found = families(records, bases, memo) if weighed else {}
    if any(arrays.worth_it(f.rows) for f in found.values()):
        _in_arrays(rows, bases, found, rules, can_confirm, advice, decided, screened,
                   rows_found(memo, records) if rows is records else {})
    for record in rows:
        judge(record, bases[record.id], rules, can_confirm, advice, said, found,
              decided.get(record.id))


def _in_arrays(rows: list[Record], bases: dict[str, dict[str, Stored]], found: Families,
               rules: Rules, can_confirm: int, advice: Advice | None,
               decided: dict[str, dict[str, Verdict]], levels_only: bool,
               known: dict[tuple[str, str], list[arrays.Valued]]) -> None:
    """Add to `decided` the verdicts compare/arrays.py gives of the rows of large families
    (those it leaves out are judged in full); levels_only: a save's, as the screen's. `known`:
    the families' rows with their values, as they were found (all of `rows`' families)."""
    by_family: dict[tuple[str, str], list[arrays.Valued]] = {}
    for key, family in found.items() if known else ():
        if arrays.worth_it(family.rows):
            by_family[key] = [row for row in known[key]
                              if row[0][1].name not in decided.get(row[0][0].id, ())
                              ] if decided else known[key]
    for record in rows if not known else ():
        base, done = bases[record.id], decided.get(record.id, {})
        for m in record.metrics:
            key = (record.test or record.id, m.name)
            old, family = base.get(m.name), found.get(key)
            if old is not None and m.name not in done and family is not None and \
                    arrays.worth_it(family.rows):
                by_family.setdefault(key, []).append(((record, m, old), None))
    for key, members in by_family.items():
        for (rid, name), verdict in arrays.judged(members, found[key], rules, can_confirm,
                                                  advice, levels_only).items():
            decided.setdefault(rid, {})[name] = verdict


def _array_families(records: list[Record]) -> set[tuple[str, str]]:
    """The (test, metric) of the families compare/arrays.py will judge (arrays.worth_it)."""
    if len(records) < arrays.ARRAY_ROWS:
        return set()
    rows: dict[tuple[str, str], int] = {}
    for record in records:
        for m in record.metrics:
            key = (record.test or record.id, m.name)
            rows[key] = rows.get(key, 0) + 1
    return {key for key, count in rows.items() if arrays.worth_it(count)}


def _screen(record: Record, base: dict[str, Stored], rules: Rules,
            skipped: set[tuple[str, str]]) -> dict[str, Verdict]:
    """The verdicts the level screen gives of the row's metrics, by name (none for a metric
    it leaves to the full judgement, or of a family in `skipped`)."""
    decided = {}
    for m in record.metrics:
        old = base.get(m.name)
        if old is None or not m.compared or (record.test or record.id, m.name) in skipped:
            continue
        converted, refused, note = _same_quantity(m, old)
        verdict = refused or _noted(level_screen.screened(
            m, record.values_of(m.name), converted, rules), note)  # type: ignore[arg-type]
        if verdict is not None:
            decided[m.name] = verdict
    return decided


def judge(record: Record, base: dict[str, Stored], rules: Rules, can_confirm: int = 0,
          advice: Advice | None = None, said: str = "", families: Families | None = None,
          decided: dict[str, Verdict] | None = None) -> None:
    """Fill `record.verdicts` against `base` (the evidence's metrics of the same row); `said`
    opens each verdict's basis (what the evidence is, where that is not the stored baseline);
    `families`: the run's, where the row is one of a test's several (judge_rows); `decided`:
    verdicts already given, by metric name (the level screen's)."""
    verdicts: dict[str, Verdict] = {}
    for m in record.metrics:
        old = base.get(m.name)
        if decided and m.name in decided:
            verdicts[m.name] = decided[m.name]
            continue
        if not m.compared:
            if old is not None:
                # A figure measured before and now only shown would leave the comparison
                # without a word.
                verdicts[m.name] = Verdict(
                    "missing", unit=old.unit, baseline=old.reference,
                    basis=f"measured in the baseline, recorded as a {m.kind} now")
            continue
        if old is None:
            verdicts[m.name] = judge_metric(m, record.values_of(m.name), None, rules)
            continue
        converted, refused, note = _same_quantity(m, old)
        if refused is not None:
            verdicts[m.name] = refused
            continue
        family = families.get((record.test or record.id, m.name)) if families else None
        verdicts[m.name] = _noted(judge_metric(m, record.values_of(m.name), converted, rules,
                                               can_confirm, advice, family), note)
    _follow_timings(record, verdicts)
    for name, old in base.items():
        if record.metric(name) is None:
            verdicts[name] = Verdict(
                "missing", unit=old.unit, baseline=old.reference,
                basis="expected by the test (hpml.expect_missing)" if record.may_miss(name)
                else "in the baseline, not recorded by this run")
    if said:
        verdicts = {k: v if v.outcome == "new" else replace(
            v, basis=f"{said}; {v.basis}" if v.basis else said) for k, v in verdicts.items()}
    record.verdicts = verdicts


def _follow_timings(record: Record, verdicts: dict[str, Verdict]) -> None:
    """Metrics derived from a timing take that timing's verdict (a bandwidth regresses exactly
    when its time does): one decision per measurement, whatever is derived from it. The
    derived metric keeps its own values, change and accepted level."""
    for m in record.metrics:
        source = verdicts.get(m.derived_from) if m.derived_from else None
        own = verdicts.get(m.name)
        if (source is None or own is None or own.outcome in ("new", "incomparable")
                or source.outcome in ("new", "incomparable") or not math.isfinite(m.value)):
            continue
        verdicts[m.name] = replace(source, unit=own.unit, baseline=own.baseline,
                                   current=own.current, change=own.change,
                                   relative=own.relative, accepted=own.accepted,
                                   basis=f"follows {m.derived_from}: {source.basis}")


# -- saying it ----------------------------------------------------------------------------------

def failures(record: Record, rules: Rules) -> list[str]:
    """One line per metric of a judged row that fails the comparison: regressed, missing
    (unless expected), incomparable; each names the row by its id (the test's node id, and its
    row columns)."""
    lines = []
    for name, v in record.verdicts.items():
        m = record.metric(name)
        if v.outcome == "regressed" and v.current is not None and not math.isfinite(v.current):
            lines.append(f"{record.id} {name}: {v.current} where the baseline has "
                         f"{format_value(v.baseline, v.unit)} (the run produced no number)")
        elif v.outcome == "regressed":
            tol = rules.tolerance_of(m) if m is not None else rules.tolerance
            lines.append(f"{record.id} {name}: "
                         f"{format_change(v.baseline, v.current, v.unit)} ({v.change:+.1%}, "
                         f"tolerance {tol:.0%}): {v.basis}")
        elif v.outcome == "missing" and not record.may_miss(name):
            if m is not None:
                lines.append(f"{record.id} {name}: {v.basis}; if intended, a save accepts "
                             "it (--hpml-save-baseline)")
            else:
                lines.append(f"{record.id} {name}: in the baseline "
                             f"({format_value(v.baseline, v.unit)}) but not recorded by this "
                             "run; if that is expected (an out-of-memory batch, a removed "
                             "metric), call hpml.expect_missing(...) in the test")
        elif v.outcome == "unconfirmed" and rules.fail_unconfirmed:
            lines.append(f"{record.id} {name}: "
                         f"{format_change(v.baseline, v.current, v.unit)} ({v.change:+.1%}), "
                         f"unconfirmed (--fail-unconfirmed): {v.basis}")
        elif v.outcome == "incomparable":
            lines.append(f"{record.id} {name}: {v.basis}")
        if rules.strict_blind and v.has_blind_spot and not (m is not None and m.derived_from):
            lines.append(f"{record.id} {name}: a blind spot (--hpml-strict-blind-spots): "
                         f"{v.blind}")
    return lines


def missing_row(record: Record, base: dict[str, Stored], expected: bool = False) -> Record:
    """A row of the evidence that this run did not make: every metric of it `missing`."""
    row = Record(id=record.id, experiment=record.experiment, test=record.test,
                 params=dict(record.params), order=list(record.order),
                 expected_missing=["*"] if expected else [])
    judge(row, base, Rules())
    return row
