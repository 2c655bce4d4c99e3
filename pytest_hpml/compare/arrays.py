"""A large family's ordinary rows judged as arrays (a value of the compare stage, used by the
engine): a sweep of 10 000 single-call rows spent half a second of its compare, and as much of
its save, building each row's noise in Python lists, 46 us a row.

An ordinary row records its metric as measured only (no yardstick, no compute pace), against
evidence in the same unit and direction, with every value a positive number. For those rows
the numbers verdicts.py weighs a change with (the change of the medians; the spread between
processes and the drift between occasions, noise.estimate; the family's floor, Family.floor;
the detectable change, Noise.mdc; the family's tails, Family.within_tails) are the same
formulas, taken over all the family's rows of one shape (the same saves, the same processes
now) at once. A row whose stored runs hold several modes (compare/modes.py, found as arrays by
compare/array_modes.py) is judged as verdicts._judge_modes judges it: each value measured from
its nearest mode, without the family's floor or tails. Only the verdicts that need nothing
more are given here (compare/array_verdicts.py): a change within the tolerance (`unchanged`),
one the noise hides (`ambiguous`), and a change caught or suspected that the family's tails
hold (`ambiguous`), with the blind spot where there is one. A change caught or confirmed
beyond the tails (the machine's moves are weighed there), a row whose spread between processes
is unknown (the rank test, `unconfirmed`), or whose processes now switched modes, is left to
the full judgement with every row of another kind. A save asks only whether a change starts a
new level: a change within the tolerance gets the level screen's verdict, one the noise hides
its detectable change without the noise in words or the blind spot, as the screen gives them
(compare/level_screen.py).

The sums are numpy's (pairwise), not math.fsum's: the numbers agree to the last digits, not
bit for bit (tests/test_array_judgement.py compares every verdict with the full judgement's).
numpy is an extra (`arrays`; this repository's suites have it): without it, every row is
judged row by row.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from pytest_hpml.compare import array_modes, array_noise, array_verdicts, level_screen
from pytest_hpml.compare.array_verdicts import Asked
from pytest_hpml.compare.basis import within_tolerance_words
from pytest_hpml.compare.families import Family, RowShare
from pytest_hpml.compare.noise import Advice
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.results import Metric, Record, Replicates, Verdict

#: A family of this many rows or more is judged as arrays where numpy is imported already (a
#: suite of torch's): 100 rows took 5.5 ms so, 8.2 ms row by row; 1 000 rows 36 ms and 59 ms.
ARRAY_ROWS = 100
#: ... and of this many where judging as arrays would import numpy (0.05-0.07 s: the rows'
#: Python costs about 25 us a row more than the arrays').
ARRAY_ROWS_TO_IMPORT = 2500


def worth_it(rows: int) -> bool:
    """Whether a family of `rows` rows is judged as arrays: large enough to repay numpy's
    import where it is not imported yet, and numpy installed."""
    if rows < ARRAY_ROWS:
        return False
    if sys.modules.get("numpy") is None and rows < ARRAY_ROWS_TO_IMPORT:
        return False
    return available()


def _numpy() -> Any | None:
    """numpy where it is installed (the `arrays` extra; the suites have it): without it every
    row is judged row by row, to the same verdicts."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


def available() -> bool:
    """Whether numpy is installed (rows are judged as arrays)."""
    return _numpy() is not None


#: One row of a family: its record, its metric now, and the evidence of that metric.
Row = tuple[Record, Metric, Stored]


def _runs(old: Stored) -> list[float]:
    """Stored.runs, read only: not copied (a list a row for 10 000 rows, twice)."""
    return old.history or [old.value]


#: Rows of one shape have as many stored runs, grouped by the same saves (and the saves by the
#: same occasions), and as many processes now: their values make one array each.
Shape = tuple[int, tuple[int, ...] | None, tuple[int, ...] | None, int]


def _shape(now: Replicates, old: Stored) -> Shape:
    saves = tuple(old.history_saves) if old.history and old.history_saves else None
    together = old.saves_together
    return len(_runs(old)), saves, tuple(together) if together else None, len(now.values)


def _measured_only(now: Replicates, old: Stored) -> bool:
    """Whether the metric's only series is the values as measured (evidence.series)."""
    return not ((now.relative is not None and (old.relative_history or old.relative))
                or (now.paced is not None and old.paced_history))


def _positive(np: Any, values: Any) -> Any:
    """Which rows of `values` hold only positive numbers (noise.logs leaves the others out,
    which the rows of one shape would not be)."""
    with np.errstate(invalid="ignore"):  # NaN compares false, unwarned
        return (np.isfinite(values) & (values > 0)).all(axis=1)


def _kind_judged_here(m: Metric, now: Replicates, old: Stored) -> bool:
    """Whether verdicts.py would judge this metric as measured alone against evidence in the
    same unit and direction (its values are looked at as arrays: _judge_shape)."""
    return (m.compared and not m.exact and not old.exact and not old.seeded_from
            and old.unit == m.unit and old.better == m.better and bool(now.values)
            and _measured_only(now, old))


#: A row with its values, where they were taken already (None: taken here).
Valued = tuple[Row, Replicates | None]


def judged(rows: Sequence[Valued], family: Family, rules: Rules, can_confirm: int,
           advice: Advice | None = None, levels_only: bool = False
           ) -> dict[tuple[str, str], Verdict]:
    """The verdicts this module can give of `rows` (one family's, judged at its alpha), by
    (row id, metric name); the rows it leaves out are for the full judgement. levels_only (a
    save's question, which confirms nothing): a change within the tolerance gets the level
    screen's verdict, one the noise hides a verdict without the noise in words or the blind
    spot, as the screen's (compare/level_screen.py); the outcomes are the full judgement's."""
    shapes: dict[Shape, list[tuple[Row, Replicates]]] = {}
    for row, now in rows:
        record, m, old = row
        if now is None:
            now = record.values_of(m.name)
        if _kind_judged_here(m, now, old):
            shapes.setdefault(_shape(now, old), []).append((row, now))
    found: dict[tuple[str, str], Verdict] = {}
    np = _numpy() if shapes else None
    if np is None:
        return found
    asked = Asked(family, rules, family.alpha(rules.alpha), 0 if levels_only else can_confirm,
                   advice or Advice(), levels_only)
    for (h, saves, together, k), members in shapes.items():
        found.update(_judge_shape(np, members, h, (list(saves) if saves else None,
                                                   list(together) if together else None),
                                  k, asked))
    return found


#: One row of a family as engine.families gathers it: its id, the metric's name, its values
#: now and its evidence.
Member = tuple[str, str, Replicates, Stored]


def shares(members: Sequence[Member]) -> dict[tuple[str, str], RowShare]:
    """Each ordinary member's share of its family (families.row_share), by (row id, metric
    name), taken for all the members of one shape at once; the others are left out (all of
    them without numpy)."""
    np = _numpy() if members else None
    if np is None:
        return {}
    shapes: dict[Shape, list[Member]] = {}
    for member in members:
        _, _, now, old = member
        if now.values and _measured_only(now, old):
            shapes.setdefault(_shape(now, old), []).append(member)
    found: dict[tuple[str, str], RowShare] = {}
    for (h, saves, _, k), rows in shapes.items():
        history = np.array([_runs(old) for *_, old in rows], dtype=float).reshape(-1, h)
        now = np.array([now.values for _, _, now, _ in rows], dtype=float).reshape(-1, k)
        positive = _positive(np, history) & _positive(np, now)
        if not positive.all():
            history, now = history[positive], now[positive]
            rows = [row for row, kept in zip(rows, positive, strict=True) if kept]
        logs, now_logs = np.log(history), np.log(now)
        groups = array_noise.occasions_of(logs, list(saves) if saves else None)
        squares, dof = array_noise.squares_within(np, groups, now_logs)
        change = now_logs.mean(axis=1) - logs.mean(axis=1)
        for i, (rid, name, _, _) in enumerate(rows):
            found[rid, name] = (float(squares[i]), dof, float(change[i]))
    return found


def _judge_shape(np: Any, members: list[tuple[Row, Replicates]], h: int,
                 saves: array_noise.Saves, k: int, asked: Asked
                 ) -> dict[tuple[str, str], Verdict]:
    history = np.array([_runs(row[2]) for row, _ in members], dtype=float).reshape(-1, h)
    now = np.array([values.values for _, values in members], dtype=float).reshape(-1, k)
    ordinary, modal = _one_mode(np, history, now, asked.rules.mode_gap)
    found = _judge_modal(np, members, modal, (history, now), saves, k, asked) \
        if modal is not None else {}
    if not ordinary.all():
        history, now = history[ordinary], now[ordinary]
        members = [member for member, kept in zip(members, ordinary, strict=True) if kept]
    reference, current = np.median(history, axis=1), np.median(now, axis=1)
    found.update(_weighed(np, members, (history, now),
                          (reference, current, _changes(np, reference, current)), saves, k,
                          asked, asked.family))
    return found


def _changes(np: Any, before: Any, after: Any) -> Any:
    """basis.relative_change of each row's levels (positive numbers here), on arrays."""
    return np.where(before == after, 0.0, (after - before) / np.abs(before))


def _judge_modal(np: Any, members: list[tuple[Row, Replicates]], found: array_modes.Modes,
                 values: tuple[Any, Any], saves: array_noise.Saves, k: int, asked: Asked
                 ) -> dict[tuple[str, str], Verdict]:
    """verdicts._judge_modes of the rows whose stored runs hold several modes (`found`: the
    modes of the rows of `members` that hold some, whose `values` are their stored runs and
    processes now): each value measured from its nearest mode, judged as measured without the
    family's floor or tails, the change from the mode nearest to this run's value. A single
    call's rows of a few microseconds land in two modes in half a 10 000-row sweep (a save
    judged 4 227 of them in full, 70 us each)."""
    several = np.flatnonzero(found.stored >= 2)
    if not len(several):
        return {}
    modes_of = found.taken(several)
    places = modes_of.rows.tolist()
    history = modes_of.normalized(np, values[0][places])
    now = modes_of.normalized(np, values[1][places])
    current = np.median(values[1][places], axis=1)
    anchor = modes_of.nearest(np, current[:, None])[:, 0]
    change = _changes(np, np.median(history, axis=1), np.median(now, axis=1))
    return _weighed(np, [members[i] for i in places], (history, now), (anchor, current, change),
                    saves, k, asked, Family(len(places), {}),
                    [partial(array_verdicts.bimodal, modes_of, j) for j in range(len(places))])


def _weighed(np: Any, members: list[tuple[Row, Replicates]], values: tuple[Any, Any],
             levels: tuple[Any, Any, Any], saves: array_noise.Saves, k: int, asked: Asked,
             family: Family, notes: list[Callable[[], str]] | None = None
             ) -> dict[tuple[str, str], Verdict]:
    """The verdicts of rows of one shape whose `values` (stored runs, processes now) are
    judged, measured from `levels` (each row's stored level, its value now, the change
    between them), with `family`'s floor and tails; `notes`: what each row's evidence adds to
    the noise in words."""
    history, now = values
    reference, current, change = levels
    rules, found = asked.rules, {}
    tolerances = [rules.tolerance_of(m, old) for (_, m, old), _ in members]
    weighed = list(range(len(members)))
    if asked.levels_only:
        # A change within the tolerance starts no level, whatever the noise: said as the
        # level screen says it, the noise not weighed.
        weighed, words = [], {}
        for i, ((record, m, old), _) in enumerate(members):
            tol, c = tolerances[i], float(change[i])
            if abs(c) <= tol:
                if tol not in words:  # one tolerance for most rows: said once
                    words[tol] = within_tolerance_words(tol)
                found[record.id, m.name] = level_screen.said(
                    "unchanged", words[tol], m, old, float(current[i]), c, k,
                    float(reference[i]))
            else:
                weighed.append(i)
    logs, now_logs = np.log(history[weighed]), np.log(now[weighed])
    noise = array_noise.noise_of(np, logs, saves, now_logs, [members[i][0] for i in weighed],
                                 rules, family)
    tol = np.array([tolerances[i] for i in weighed], dtype=float)
    grown = noise.detectable(np, asked.alpha)
    change_w = change[weighed]
    # max(tol, grown) and max(0, grown) as verdicts.py takes them; beyond() on all the rows
    mdcs = np.maximum(tol, grown)
    caught = array_noise.beyond(np, change_w, mdcs)
    limit = rules.max_detectable
    blind = (np.maximum(0.0, grown) > limit) if limit else np.zeros(len(weighed), dtype=bool)
    confirmed = array_verdicts.to_confirm(np, noise, change_w, tol, caught,
                                          [members[i][0][1].better for i in weighed], k, asked)
    tails = array_verdicts.within_tails(np, family, now_logs.mean(axis=1) - logs.mean(axis=1))
    reference, current, change = reference.tolist(), current.tolist(), change.tolist()
    mdcs, caught, blind, grown = mdcs.tolist(), caught.tolist(), blind.tolist(), grown.tolist()
    for j, i in enumerate(weighed):
        (record, m, old), values_now = members[i]
        verdict = array_verdicts.verdict(
            m, old, noise, j, (reference[i], current[i], change[i]),
            (tolerances[i], mdcs[j], max(0.0, grown[j]), blind[j], caught[j]), k, asked,
            bool(confirmed[j]), tails[j], values_now, notes[i] if notes else None)
        if verdict is not None:
            found[record.id, m.name] = verdict
    return found


def _one_mode(np: Any, history: Any, now: Any, gap: float
              ) -> tuple[Any, array_modes.Modes | None]:
    """Which rows hold only positive numbers, in one mode (modes.modal finds none in their
    stored runs and processes now): the cheap test of the sorted logs' extremes (modes.
    could_hold_modes) on all of them at once, the full one where it says they could; and the
    modes of the rows it found them in, by place."""
    values = np.concatenate([history, now], axis=1)
    ordinary = _positive(np, values)
    logs = np.sort(np.log(np.where(ordinary[:, None], values, 1.0)), axis=1)
    if logs.shape[1] < 4:
        return ordinary, None
    could = np.flatnonzero(ordinary & (logs[:, -2] - logs[:, 1] >= gap))
    if not len(could):
        return ordinary, None
    found = array_modes.modal(np, history, now, could, gap)
    ordinary[found.rows] = False
    return ordinary, found
