"""The modes of the rows of one shape of a large family (a part of the compare stage, used by
compare/arrays.py): modes.modal's groups, levels and landings, taken on all the rows at once
as arrays of their sorted logs. A single call's rows of a few microseconds look as if they
could hold modes in nearly every row of a 10 000-row sweep (the gap between their second and
second-to-last values is 30 % or more), and half of them do: splitting them one by one, and
measuring each value from its nearest mode, took 30 us a row. numpy is passed in by the
caller, which imports it only where it judges as arrays."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pytest_hpml.compare.modes import MIN_SPREAD, MODE_GAP, SEPARATION, Modal


@dataclass(frozen=True)
class Modes:
    """The modes of the rows that hold them: Modal(self.modal(j)) of the `j`th is the one
    modes.modal finds in row `rows[j]` of the arrays it was taken of."""

    rows: Any  # the rows' places in the arrays asked
    levels: Any  # the stored modes' levels, lowest first, NaN past each row's last
    stored: Any  # how many modes the stored runs hold
    landed: Any  # how many modes this run's processes landed in
    new: Any  # whether some landed in a mode the stored runs do not hold

    def modal(self, j: int) -> Modal:
        return Modal(self.levels[j, :int(self.stored[j])].tolist(), int(self.landed[j]),
                     bool(self.new[j]))

    def taken(self, rows: Any) -> Modes:
        """The modes of the rows `rows` (indices into self's) only."""
        return Modes(self.rows[rows], self.levels[rows], self.stored[rows], self.landed[rows],
                     self.new[rows])

    def nearest(self, np: Any, values: Any) -> Any:
        """Modal.nearest of each value (rows by values, positive numbers), as arrays: the stored
        mode's level nearest to it in logs, the lowest of two as near."""
        logs = np.log(self.levels)
        apart = np.abs(logs[:, None, :] - np.log(values)[:, :, None])
        nearest = np.argmin(np.where(np.isnan(apart), np.inf, apart), axis=2)
        return np.take_along_axis(self.levels, nearest, axis=1)

    def normalized(self, np: Any, values: Any) -> Any:
        """Modal.normalized of each row of `values` (positive numbers): each value measured
        from its nearest stored mode."""
        return values / self.nearest(np, values)


def modal(np: Any, history: Any, now: Any, rows: Any, gap: float = MODE_GAP) -> Modes:
    """The modes of the rows `rows` (indices) of `history` and `now` (rows by values, every
    value a positive number) where modes.modal finds some (`gap`: as its)."""
    h = history.shape[1]
    values = np.concatenate([history[rows], now[rows]], axis=1)
    order = np.argsort(values, axis=1)
    logs = np.log(np.take_along_axis(values, order, axis=1))
    cuts = _cuts(np, logs, gap)
    some = np.flatnonzero(cuts.any(axis=1))
    logs, cuts, stored_at = logs[some], cuts[some], order[some] < h
    n, v = logs.shape
    # Each group a range of the sorted logs: where it starts and where it ends (past its last
    # value), in group order; a row's places past its last group hold 0 and 1.
    starts = np.concatenate([np.ones((n, 1), dtype=bool), cuts], axis=1)
    ends = np.concatenate([cuts, np.ones((n, 1), dtype=bool)], axis=1)
    count = starts.sum(axis=1)
    groups = int(count.max()) if n else 0
    kept = np.arange(groups)[None, :] < count[:, None]
    first, last = np.zeros((n, groups), dtype=int), np.ones((n, groups), dtype=int)
    first[kept] = np.nonzero(starts)[1]  # row-major: each row's starts in order
    last[kept] = np.nonzero(ends)[1] + 1
    size = last - first
    middle = np.take_along_axis(logs, np.minimum(first + (size - 1) // 2, v - 1), axis=1) + \
        np.take_along_axis(logs, np.minimum(first + size // 2, v - 1), axis=1)
    level = np.exp(middle / 2)  # statistics.median's, of the group's logs
    # Which groups hold a stored value, which a value of this run's processes.
    before = np.concatenate([np.zeros((n, 1), dtype=int), np.cumsum(stored_at, axis=1)],
                            axis=1)
    held = np.take_along_axis(before, last, axis=1) - np.take_along_axis(before, first, axis=1)
    stored = kept & (held > 0)
    landed = kept & (held < size)
    # The stored modes' levels, lowest first (a group of stored values before all others).
    ranked = np.argsort(np.where(stored, 0, 1), axis=1, kind="stable")
    levels = np.where(np.take_along_axis(stored, ranked, axis=1),
                      np.take_along_axis(level, ranked, axis=1), np.nan)
    return Modes(np.asarray(rows)[some], levels, stored.sum(axis=1), landed.sum(axis=1),
                 (landed & ~stored).any(axis=1))


def _cuts(np: Any, logs: Any, least: float) -> Any:
    """modes._split's cuts of each row of sorted `logs` (rows by values), where a cut at i
    parts the values up to i from those after: every gap of `least` or more, then, until the
    cuts hold, those beside a lone value dropped, or else those narrower than SEPARATION times
    the spread inside the groups left dropped."""
    v = logs.shape[1]
    gaps = np.diff(logs, axis=1)
    cuts = gaps >= least
    active = cuts.any(axis=1)
    while active.any():
        rows = np.flatnonzero(active)
        part = cuts[rows]
        group = np.concatenate([np.zeros((len(rows), 1), dtype=int),
                                np.cumsum(part, axis=1)], axis=1)
        same = group[:, :, None] == group[:, None, :]
        size = same.sum(axis=2)
        lone = part & ((size[:, :-1] < 2) | (size[:, 1:] < 2))
        has_lone = lone.any(axis=1)
        # Rows with no lone group: the spread inside their groups (pooled, 1 % at least),
        # and the cuts it keeps.
        row_logs = logs[rows]
        means = (same * row_logs[:, None, :]).sum(axis=2) / size
        squares = ((row_logs - means) ** 2).sum(axis=1)
        dof = v - (part.sum(axis=1) + 1)
        spread = np.maximum(np.sqrt(squares / np.maximum(dof, 1)), MIN_SPREAD)
        wide = part & (gaps[rows] >= SEPARATION * spread[:, None])
        kept = np.where(has_lone[:, None], part & ~lone, wide)
        settled = ~has_lone & (kept == part).all(axis=1)
        cuts[rows] = kept
        active[rows] = ~settled & kept.any(axis=1)
    return cuts
