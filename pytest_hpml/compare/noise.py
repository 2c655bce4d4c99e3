"""The noise a verdict weighs a change against: how far values of identical code land apart on
this machine, for one series of a metric (as measured, or relative to the yardstick).

Two kinds of spread, with different cures:

- between processes measured together (the processes of one save, the test's own and its
  confirmations now): allocator state, thread placement; more processes average it out;
- between occasions (the day's drift: the machine's speed an hour later, with other
  neighbours): processes measured together share it, so no number of them averages it out.
  Each save is one occasion, but saves made within the hour are one occasion together
  (provenance.occasions_in_time): they share the machine's speed of that hour. A metric's drift
  is learned from its stored history once it holds DRIFT_MIN_SAVES occasions (the spread of
  their means, less what the spread between processes explains); until then a time or a rate
  is assumed to drift by --hpml-drift (5 %), or by what its saves of one hour show where that
  is more, and the verdict says so. A baseline saved within one minute cannot know the day's
  drift, nor can five saves made minutes apart (they "learned" 0-2 %, and the compare an hour
  later read the same code 10-20 % slower): the assumption makes their first comparisons
  cautious instead of alarming.

Values are compared in logs (a speed-up and a slow-down of the same factor weigh the same).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

from pytest_hpml.compare.advice import Advice
from pytest_hpml.measure.stats import float_stdev, squares_within, t_quantile
from pytest_hpml.report.units import DETECTABLE_SHOWN_UP_TO

#: Assumed drift of a time or a rate between occasions until the history has seen it.
DEFAULT_DRIFT = 0.05
#: Occasions (saves, those of one hour taken as one) in a metric's history before its drift is
#: learned from them.
DRIFT_MIN_SAVES = 3
#: Units whose values move with the machine's speed: only these are assumed to drift.
SPEED_UNITS = ("s", "B/s", "FLOP/s", "OP/s", "1/s")
#: Degrees of freedom beyond which Student's t is the normal distribution, for our purposes.
LARGE_DOF = 1000


def pct(x: float) -> str:
    return f"{100 * x:.1f} %"


def logs(values: list[float]) -> list[float]:
    return [math.log(v) for v in values if v > 0]


def by_occasion(groups: list[list[float]], together: list[int] | None) -> list[list[float]]:
    """`groups` (each save's values, oldest first, as occasions() splits them) joined into the
    occasions they were saved on: `together` (oldest first) says how many consecutive saves
    each holds, counted from the newest back; groups older than it stay apart."""
    if not together:
        return groups
    joined, end = [], len(groups)
    for count in reversed(together):
        if end <= 0:
            break
        start = max(0, end - count)
        joined.append([v for g in groups[start:end] for v in g])
        end = start
    return [*groups[:end], *joined[::-1]]


def occasions(values: list[float], saves: list[int] | None) -> list[list[float]]:
    """`values` (oldest first) split into the groups each save contributed, from the newest
    save back; values older than the saves recorded (a file written before they were) form
    one group."""
    if not saves:
        return [list(values)] if values else []
    groups, end = [], len(values)
    for count in reversed(saves):
        if end <= 0:
            break
        start = max(0, end - count)
        groups.append(list(values[start:end]))
        end = start
    if end > 0:
        groups.append(list(values[:end]))
    return groups[::-1]


@dataclass(frozen=True)
class Noise:
    """The spread a series has shown, and how many values stand on each side."""

    between: float | None  # stdev of ln(value) between processes measured together; None: unknown
    dof: int  # degrees of freedom behind `between`
    within: float  # combined relative uncertainty of the two medians compared (their notches)
    drift: float = 0.0  # stdev of ln(level) between occasions
    drift_dof: int | None = None  # None: assumed (not learned); else saves - 1
    saves: int = 1  # occasions in the stored history
    runs_now: int = 1
    runs_before: int = 1
    pooled_rows: int = 0  # floored by what this many rows of the test show (families.py)
    pooled_drift: bool = False  # the drift is the family's (its rows' changes)
    saves_made: int = 0  # the saves behind `saves` occasions, where some shared one (else 0)
    # The drift is what saves of one occasion showed, above the one assumed (drift_dof: theirs).
    hour_drift: bool = False
    # The assumed drift is the median of what this many of the baseline's metrics learned
    # (compare/drift_prior.py); 0: --hpml-drift's.
    drift_prior: int = 0

    @property
    def drift_weight(self) -> float:
        """How much of the drift a difference carries (drift_weight)."""
        return drift_weight(self.saves)

    @property
    def drift_var(self) -> float:
        """The drift's share of the variance of a difference, in logs."""
        return drift_variance(self.drift, self.saves)

    def threshold(self, alpha: float, runs_now: int | None = None,
                  extra_dof: int = 0) -> float:
        """The smallest change in logs the evidence separates from noise at level alpha, with
        `runs_now` processes now (default: as measured) and `extra_dof` more behind the spread
        between processes."""
        return threshold_of(self.between, self.dof + extra_dof, self.within, self.drift_var,
                            self.drift_dof, runs_now or self.runs_now, self.runs_before, alpha)

    def mdc(self, tolerance: float, alpha: float, runs_now: int | None = None,
            extra_dof: int = 0) -> float:
        """The minimum detectable change (relative), never below the tolerance."""
        threshold = self.threshold(alpha, runs_now, extra_dof)
        # Beyond e^700 no change is detectable: a tiny alpha over few degrees of freedom.
        return max(tolerance, math.expm1(threshold) if threshold < 700 else math.inf)

    def drift_mdc(self, tolerance: float, alpha: float) -> float:
        """The detectable change that no number of processes brings lower: the drift's alone
        (never below the tolerance)."""
        return max(tolerance, math.expm1(quantile(1 - alpha, math.inf)
                                         * math.sqrt(self.drift_var)))

    def processes_for(self, limit: float, alpha: float, most: int = 20) -> int | None:
        """The fewest processes on each side that would bring the detectable change under
        `limit` with the spreads seen (None: no number up to `most` would). More processes
        do not always help: they shrink the spread between processes, and with it the degrees
        of freedom of the whole where a learned drift is left (Welch-Satterthwaite), so the
        t quantile grows (spread 18 %, drift 8 % over 2 degrees of freedom: 5 processes would,
        20 would not). The counts are asked in turn, not bisected."""
        if self.between is None:
            return None
        between, drift_var, drift_dof = self.between, self.drift_var, self.drift_dof

        def threshold(n: int) -> float:
            # A side that already holds more processes keeps them; the scaled noise's
            # threshold taken from its numbers, not a Noise built for each n (a 10 000-row
            # sweep's blind spots asked this 43 000 times: a third of its judgement).
            before, now = max(n, self.runs_before), max(n, self.runs_now)
            return threshold_of(between, max(self.dof, before + now - 2), 0.0, drift_var,
                                drift_dof, now, before, alpha)

        # No count can do better than its own variance under the normal quantile (Student's t
        # is never below it), and that bound falls as processes are added: the counts below
        # the first whose bound is within the limit (found by bisection) are never asked. In
        # a 10 000-row sweep that first count was the answer for 97 % of the blind spots.
        z, reach = quantile(1 - alpha, math.inf), math.log1p(limit) + 1e-9

        def hopeless(n: int) -> bool:
            before, now = max(n, self.runs_before), max(n, self.runs_now)
            return z * math.sqrt(between ** 2 * (1 / now + 1 / before) + drift_var) > reach

        if hopeless(most):
            return None
        low, high = 2, most
        while low < high:
            middle = (low + high) // 2
            if hopeless(middle):
                low = middle + 1
            else:
                high = middle
        for n in range(low, most + 1):
            t = threshold(n)
            if max(0.0, math.expm1(t) if t < 700 else math.inf) <= limit:
                return n
        return None

    @property
    def process_share(self) -> float:
        """The share of the variance of a difference that the spread between processes makes
        (the rest is drift, or the within-run view)."""
        if self.between is None:
            return 0.0
        process_var = self.between ** 2 * (1 / self.runs_now + 1 / self.runs_before)
        total = process_var + self.drift_var
        return process_var / total if total else 1.0

    def describe(self) -> str:
        parts = []
        if self.between is not None:
            parts.append(f"between-run spread {pct(self.between)} from {self.runs_before} "
                         f"stored and {self.runs_now} current process(es)")
        else:
            parts.append(f"between-run spread unknown ({self.runs_before} stored run, "
                         f"{self.runs_now} current)")
        if self.pooled_rows:
            parts[-1] += f" (at least what the test's {self.pooled_rows} rows show together)"
        if self.within:
            parts.append(f"within-run {pct(self.within)}")
        if self.pooled_drift:
            parts.append(f"drift between occasions {pct(self.drift)}, as far as the test's "
                         f"{self.pooled_rows} rows moved apart between them")
        elif self.hour_drift:
            parts.append(f"drift between occasions {pct(self.drift)}, as far as its "
                         f"{self.saves_made} saves of {self._occasions_held()} moved apart "
                         f"(learned once the baseline holds saves of {DRIFT_MIN_SAVES} "
                         "occasions, those of one hour counted once)")
        elif self.drift_dof:
            held = f"{self.saves} saves" if not self.saves_made else \
                f"{self.saves} occasions ({self.saves_made} saves, those of one hour counted once)"
            parts.append(f"drift between occasions {pct(self.drift)}, learned from {held}")
        elif self.drift:
            held = f"{DRIFT_MIN_SAVES} saves, it has {self.saves}" if not self.saves_made else \
                (f"saves of {DRIFT_MIN_SAVES} occasions, those of one hour counted once; it "
                 f"has {self.saves_made} saves of {self._occasions_held()}")
            source = "--hpml-drift" if not self.drift_prior else \
                f"the median of what {self.drift_prior} of the baseline's metrics learned"
            parts.append(f"drift between occasions {pct(self.drift)} assumed ({source}; "
                         f"learned once the baseline holds {held})")
        return ", ".join(parts)

    def _occasions_held(self) -> str:
        return "one occasion" if self.saves == 1 else f"{self.saves} occasions"


def drift_weight(saves: int) -> float:
    """How much of the drift between occasions a difference carries: the stored level is the
    mean of `saves` occasions, the current run is one occasion."""
    return 1 + 1 / max(saves, 1)


def drift_variance(drift: float, saves: int) -> float:
    """The share of the variance of a difference that a drift between occasions (in logs)
    makes, against a stored level that is the mean of `saves` occasions."""
    return drift ** 2 * drift_weight(saves)


def threshold_of(between: float | None, dof: int, within: float, drift_var: float,
                 drift_dof: int | None, runs_now: int, runs_before: int, alpha: float) -> float:
    """Noise.threshold from its numbers: the smallest change in logs that `runs_now` processes
    now and `runs_before` stored, spread `between` (over `dof` degrees of freedom; None:
    unknown, `within` is the notches' view) and the drift's variance (learned over `drift_dof`
    degrees of freedom; None: assumed) separate from noise at level alpha."""
    if between is None:
        # One process on each side: the within-run view only (3 notches), and the drift.
        return math.hypot(3 * within, NormalDist().inv_cdf(1 - alpha) * math.sqrt(drift_var))
    process_var = between ** 2 * (1 / runs_now + 1 / runs_before)
    # Welch-Satterthwaite degrees of freedom of the two variance components; an assumed
    # drift counts as known exactly.
    spread = process_var ** 2 / dof + (drift_var ** 2 / drift_dof if drift_dof else 0.0)
    total = process_var + drift_var
    effective = total ** 2 / spread if spread > 0 else math.inf
    # Never below what the processes alone would hide: a drift adds noise of its own, which
    # cannot narrow the change that hides in theirs (symmetric, unimodal noises: Anderson's
    # theorem). The pooled degrees of freedom can: an assumed 5 % drift beside a spread of
    # 20 % over 4 degrees of freedom raised them to 4.9, and the t quantile fell more than
    # the variance grew (a save then started levels on the machine's moves).
    return max(quantile(1 - alpha, effective) * math.sqrt(total),
               quantile(1 - alpha, dof) * math.sqrt(process_var))


def quantile(p: float, dof: float) -> float:
    """Student's t quantile; the normal one for very many degrees of freedom. The degrees of
    freedom are rounded (to 0.1 below 100, to 1 above: the quantile moves by under 0.1 % with
    them) and the quantiles cached, as the rows of a sweep ask for the same ones (10 000 rows'
    verdicts and blind spots took 16 s of t quantiles without)."""
    if dof >= LARGE_DOF:
        return _normal_quantile(p)
    return _t_quantile(p, round(dof, 1) if dof < 100 else float(round(dof)))


@lru_cache(maxsize=256)
def _normal_quantile(p: float) -> float:
    return NormalDist().inv_cdf(p)


@lru_cache(maxsize=4096)
def _t_quantile(p: float, dof: float) -> float:
    return t_quantile(p, dof)


def estimate(history: list[float], saves: list[int] | None, now: list[float], within: float,
             drift: float, together: list[int] | None = None, prior: int = 0) -> Noise:
    """The noise of a series: `history` (stored values, oldest first, grouped by `saves`),
    `now` (this run's processes, one occasion), the combined notch of the two medians, and
    the drift assumed until the history has DRIFT_MIN_SAVES occasions (0: none); `together`:
    how many consecutive saves each occasion holds (Stored.saves_together; None: one each);
    `prior`: the metrics of the baseline whose median drift `drift` is (0: --hpml-drift's).
    The spread between processes is each save's; the drift, the occasions'."""
    groups = occasions(history, saves)
    stored = [g for g in (logs(g) for g in groups) if g]
    current = logs(now)
    squares, dof = squares_within((*stored, current))
    between = math.sqrt(squares / dof) if dof else None
    apart = [g for g in (logs(g) for g in by_occasion(groups, together)) if g] \
        if together else stored
    drift_dof, hour_drift = None, False
    if len(apart) >= DRIFT_MIN_SAVES:
        drift, drift_dof = learned_drift(apart, between), len(apart) - 1
    else:
        drift = math.log1p(drift) if drift > 0 else 0.0
        if len(stored) >= DRIFT_MIN_SAVES:
            # Saves of one hour that moved apart more than the assumed drift show at least
            # that much of it (the drift of a day is not less than an hour's).
            shown = learned_drift(stored, between)
            if shown > drift:
                drift, drift_dof, hour_drift = shown, len(stored) - 1, True
    return Noise(between, dof, within, drift, drift_dof, max(len(apart), 1),
                 max(len(current), 1), max(sum(len(g) for g in stored), 1),
                 saves_made=len(stored) if len(apart) < len(stored) else 0,
                 hour_drift=hour_drift, drift_prior=prior if drift_dof is None else 0)


def learned_drift(groups: list[list[float]], between: float | None) -> float:
    """The drift (in logs) that the means of `groups` (each an occasion's logs) show beyond
    what the spread between processes explains."""
    # In floats, a sum per group (statistics.fmean's generic path was a twentieth of the
    # judging of a 10 000-row sweep).
    means = [math.fsum(g) / len(g) for g in groups]
    # The occasions' means spread by the drift and by their processes' own spread.
    explained = (between or 0.0) ** 2 * sum([1 / len(g) for g in groups]) / len(groups)
    # In floats: statistics.variance sums exact fractions (most of a 10k-row save's judging
    # time went there).
    return math.sqrt(max(0.0, float_stdev(means) ** 2 - explained))


def blind_spot(n: Noise, mdc: float, limit: float, alpha: float,
               advice: Advice | None = None) -> str:
    """What a detectable change beyond `limit` means, and what would narrow it (said by the
    comparison's path: `advice`)."""
    advice = advice or Advice()
    processes = n.runs_before + n.runs_now
    spread = "unknown" if n.between is None else pct(n.between)
    if mdc > DETECTABLE_SHOWN_UP_TO:  # millions of percent mean only "blind"
        unseen = (f"cannot detect even a slowdown of {1 + DETECTABLE_SHOWN_UP_TO:.0f}x here "
                  f"(detectable over ±{DETECTABLE_SHOWN_UP_TO:.0%}")
    else:
        factor = math.floor(100 * (1 + mdc)) / 100  # rounded down: this one passes unseen
        unseen = f"cannot detect a {factor:.2f}x slowdown here (detectable ±{pct(mdc)}"
    said = f"{unseen}, the limit is ±{pct(limit)}): {processes} processes, spread {spread}"
    if n.drift and n.process_share < 0.5:
        fix = advice.drift()
    elif n.between is None:
        fix = advice.unknown_spread()
    else:
        needed = n.processes_for(limit, alpha)
        fix = advice.processes(needed, n.runs_before, n.runs_now) if needed else \
            advice.nothing()
    return f"{said}; {fix}"
