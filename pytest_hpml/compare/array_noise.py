"""Each row's noise for the rows of one shape of a large family (a part of the compare stage,
used by compare/arrays.py): the spread between processes and the drift between occasions
(noise.estimate), raised to the family's (Family.floor), and the change each row's noise lets
this machine detect (noise.threshold_of), taken on all the rows at once as arrays of their
logs. numpy is passed in by the caller, which imports it only where it judges as arrays."""

from __future__ import annotations

import math
from typing import Any

from pytest_hpml.compare.families import Family
from pytest_hpml.compare.noise import (
    DRIFT_MIN_SAVES,
    SPEED_UNITS,
    by_occasion,
    drift_variance,
    drift_weight,
    occasions,
    quantile,
)
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.measure.stats import median_uncertainty
from pytest_hpml.results import Metric

#: A row's Noise as its fields (Noise(*parts)): between, dof, within, drift, drift_dof, saves,
#: runs_now, runs_before, pooled_rows, pooled_drift, saves_made, hour_drift, drift_prior.
NoiseParts = tuple[float | None, int, float, float, int | None, int, int, int, int, bool, int,
                   bool, int]
#: The saves of a shape's stored runs (values each added), and how many consecutive saves each
#: occasion holds (Stored.saves_together; None: one each).
Saves = tuple[list[int] | None, list[int] | None]


def occasions_of(logs: Any, saves: list[int] | None, together: list[int] | None = None
                 ) -> list[Any]:
    """The columns of `logs` (rows by stored runs) that each save added (noise.occasions), or
    with `together`, each occasion (noise.by_occasion)."""
    found = occasions(list(range(logs.shape[1])), saves)
    if together:
        found = by_occasion(found, together)
    return [logs[:, g[0]:g[-1] + 1] for g in found if g]


def learned_drift(np: Any, groups: list[Any], between: Any | None) -> Any:
    """noise.learned_drift of each row: the drift its occasions' means (`groups`, arrays of
    rows by values) show beyond what the spread between processes explains."""
    means = np.stack([g.mean(axis=1) for g in groups], axis=1)
    spread = means - means.mean(axis=1, keepdims=True)
    variance = (spread * spread).sum(axis=1) / (len(groups) - 1)
    explained = (0.0 if between is None else between * between) * \
        sum(1 / g.shape[1] for g in groups) / len(groups)
    return np.sqrt(np.maximum(0.0, variance - explained))


def squares_within(np: Any, groups: list[Any], now_logs: Any) -> tuple[Any, int]:
    """stats.squares_within of each row's groups (arrays of rows by values) and its processes
    now: the sums of squares by row, and their degrees of freedom (one for all the rows)."""
    squares = np.zeros(now_logs.shape[0])
    dof = 0
    for group in [*groups, now_logs]:
        if group.shape[1] >= 2:
            centred = group - group.mean(axis=1, keepdims=True)
            squares += (centred * centred).sum(axis=1)
            dof += group.shape[1] - 1
    return squares, dof


class Noises:
    """The Noise of each row of one shape, as noise.estimate and Family.floor make it, in
    arrays: Noise(*self.parts(i)) is the `i`th row's. No Noise is built for every row: a
    10 000-row sweep built and floored one a row, a seventh of its judging, to read a threshold
    from it."""

    def __init__(self, between: Any | None, dof: Any, within: Any, drift: Any,
                 drift_dof: int | None, occasions: int, runs_now: int, runs_before: int,
                 pooled_rows: Any, moved: Any, saves_made: int, hour: Any,
                 prior: int = 0) -> None:
        self.between, self.dof, self.within, self.drift = between, dof, within, drift
        # The drift's degrees of freedom: the shape's (None: assumed), a moved row's its
        # family's (pooled_rows - 1), an `hour` row's its saves' (saves_made - 1: the drift
        # its saves of one occasion showed, above the one assumed).
        self.drift_dof, self.moved, self.pooled_rows = drift_dof, moved, pooled_rows
        self.occasions, self.runs_now, self.runs_before = occasions, runs_now, runs_before
        self.saves_made = saves_made
        self.hour = hour
        self.prior = prior  # noise.Noise.drift_prior of the rows whose drift is assumed

    def parts(self, i: int) -> NoiseParts:
        moved, rows, hour = bool(self.moved[i]), int(self.pooled_rows[i]), bool(self.hour[i])
        return (None if self.between is None else float(self.between[i]), int(self.dof[i]),
                float(self.within[i]), float(self.drift[i]),
                rows - 1 if moved else self.saves_made - 1 if hour else self.drift_dof,
                self.occasions, self.runs_now, self.runs_before, rows, moved, self.saves_made,
                hour and not moved,
                self.prior if self.drift_dof is None and not moved and not hour else 0)

    def detectable(self, np: Any, alpha: float, runs_now: int | None = None,
                   extra_dof: int = 0) -> Any:
        """Each row's detectable change without the tolerance (expm1 of noise.threshold_of,
        infinite past 700 as verdicts.py takes it), taken on all the rows at once: the same
        formulas, Student's t quantile asked row by row (noise.quantile's rounding and
        cache). `runs_now` processes now (default: as measured) and `extra_dof` more behind
        the spread between processes, as Noise.threshold takes them."""
        drift_var = drift_variance(self.drift, self.occasions)  # as well on arrays
        if self.between is None:
            # One process on each side: the within-run view only (3 notches), and the drift.
            threshold = np.hypot(3 * self.within,
                                 quantile(1 - alpha, math.inf) * np.sqrt(drift_var))
        else:
            now = runs_now or self.runs_now
            process_var = self.between ** 2 * (1 / now + 1 / self.runs_before)
            # The drift's share where it was learned (its degrees of freedom), none where
            # assumed: threshold_of's.
            drift_dof = np.where(self.moved, self.pooled_rows - 1,
                                 np.where(self.hour, self.saves_made - 1, self.drift_dof or 0))
            learned = drift_dof > 0
            spread = process_var ** 2 / (self.dof + extra_dof) + np.where(
                learned, drift_var ** 2 / np.where(learned, drift_dof, 1), 0.0)
            total = process_var + drift_var
            with np.errstate(divide="ignore", invalid="ignore"):
                effective = np.where(spread > 0, total ** 2 / spread, np.inf)
            p = 1 - alpha
            # noise.threshold_of's: never below what the processes alone would hide (the
            # rows' degrees of freedom take a few values: each quantile asked once).
            dofs, where = np.unique(np.broadcast_to(self.dof + extra_dof, total.shape),
                                    return_inverse=True)
            alone = np.array([quantile(p, d) for d in dofs.tolist()])[where]
            threshold = np.maximum(
                np.array([quantile(p, e) for e in effective.tolist()]) * np.sqrt(total),
                alone * np.sqrt(process_var))
        with np.errstate(over="ignore"):
            return np.where(threshold < 700, np.expm1(np.minimum(threshold, 700.0)), np.inf)

    def taken(self, rows: Any) -> Noises:
        """The noise of the rows `rows` (indices) only."""
        return Noises(None if self.between is None else self.between[rows], self.dof[rows],
                      self.within[rows], self.drift[rows], self.drift_dof, self.occasions,
                      self.runs_now, self.runs_before, self.pooled_rows[rows],
                      self.moved[rows], self.saves_made, self.hour[rows], self.prior)

    def could_catch(self, np: Any, change: Any, tol: Any, alpha: float, extra: int) -> Any:
        """detectable._confirmation_could_catch of each row (`change`, `tol`: the rows'),
        taken on all of them at once: whether up to `extra` more processes, as noisy as these,
        could bring the detectable change below the row's change (each count asked)."""
        if self.between is None:
            # The spread between processes is unknown until they run; a drift the family's
            # rows have shown is not, and no number of processes lowers what it hides.
            hidden = np.maximum(tol, np.expm1(quantile(1 - alpha, math.inf)
                                              * np.sqrt(drift_variance(self.drift,
                                                                       self.occasions))))
            return ~self.moved | beyond(np, change, hidden)
        found = np.zeros(len(change), dtype=bool)
        for more in range(1, extra + 1):
            mdc = np.maximum(tol, self.detectable(np, alpha, self.runs_now + more, more))
            found |= beyond(np, change, mdc)
        return found


def beyond(np: Any, change: Any, mdc: Any) -> Any:
    """detectable.beyond of each row (its change and its detectable change), on arrays."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return (change <= -1) | (np.abs(np.log1p(change)) > np.log1p(mdc))


def noise_of(np: Any, logs: Any, saves: Saves, now_logs: Any,
             rows: list[tuple[Any, Metric, Stored]], rules: Rules, family: Family) -> Noises:
    """Each row's noise (Noises) for rows of one shape: `logs` of their stored runs (rows by
    runs, grouped by `saves`: the values each save added, and the saves each occasion holds),
    `now_logs` of their processes now."""
    n, h = logs.shape
    k = now_logs.shape[1]
    stored = occasions_of(logs, saves[0])
    squares, dof = squares_within(np, stored, now_logs)
    between = np.sqrt(squares / dof) if dof else None
    apart = occasions_of(logs, *saves) if saves[1] else stored
    drift_dof, hour = None, np.zeros(n, dtype=bool)
    if len(apart) >= DRIFT_MIN_SAVES:
        drift, drift_dof = learned_drift(np, apart, between), len(apart) - 1
    else:
        assumed = rules.drift
        drift = np.array([math.log1p(assumed) if assumed > 0 and r[1].unit in SPEED_UNITS
                          else 0.0 for r in rows])
        if len(stored) >= DRIFT_MIN_SAVES:
            # noise.estimate's: saves of one hour that moved apart more than the assumed
            # drift show at least that much of it.
            shown = learned_drift(np, stored, between)
            hour = shown > drift
            drift = np.where(hour, shown, drift)
    within = np.array([math.hypot(median_uncertainty(m.samples or []), old.within)
                       for _, m, old in rows], dtype=float)
    occasions_, runs_now, runs_before = max(len(apart), 1), max(k, 1), max(h, 1)
    # Family.floor, on all the rows at once: the spread between processes raised to the
    # family's (with its degrees of freedom), and the drift to what the rows' changes show
    # beyond that spread (learned over the family's rows).
    pooled = family.spreads.get("")
    raised = np.zeros(n, dtype=bool)
    dofs = np.full(n, dof)
    if pooled is not None and pooled.between is not None:
        raised = np.ones(n, dtype=bool) if between is None else between < pooled.between
        between = np.where(raised, pooled.between, 0.0 if between is None else between)
        dofs = np.where(raised, pooled.dof, dof)
    drifts = np.zeros(n, dtype=bool)
    if pooled is not None and pooled.changes is not None:
        processes = (np.zeros(n) if between is None else between ** 2) * (
            1 / runs_now + 1 / runs_before)
        shown = np.sqrt(np.maximum(0.0, pooled.changes ** 2 - processes)
                        / drift_weight(occasions_))
        drifts = shown > drift
        drift = np.where(drifts, shown, drift)
    return Noises(between, dofs, within, drift, drift_dof, occasions_, runs_now, runs_before,
                   np.where(raised | drifts, family.rows, 0), drifts,
                   len(stored) if len(apart) < len(stored) else 0, hour,
                   rules.drift_learned_by)
