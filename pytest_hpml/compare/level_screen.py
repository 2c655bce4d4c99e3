"""What a save can tell of a metric without weighing its noise in full (a part of the compare
stage, used by the engine for a save's verdicts).

A save asks one thing of each row it did not compare: did a metric move beyond what this
machine can detect (`regressed` or `improved`: a new level)? The full judgement (verdicts.py)
answers that and more: the detectable change itself, the blind spot, the family's floor and
tails, the machine's moves; about 70 us a row of Python, most of a 10 000-row save's time.
Most rows need none of it to be answered, and this screen answers for them, exactly as the
judgement would:

- a metric whose values cannot hold modes (modes.could_hold_modes: split finds one group)
  and whose every series (as measured, relative to the yardstick, to the compute pace)
  changed within the tolerance is `unchanged`;
- one whose values as measured are its only series, and whose change lies within a floor of
  the detectable change, is `ambiguous`: the floor is what the normal quantile at the run's
  alpha gives on the metric's own spread between processes and drift, and the judgement's
  detectable change is never below it (Student's t is wider than the normal, a family shares a
  smaller alpha among its rows, and a family's floor only ever raises the spread and the
  drift), so no judgement could catch that change.

Everything else (an exact figure, a seeded baseline, a value that is not a positive number,
values that could hold modes, a change beyond the floor) goes to the full judgement. The
screened verdict says what it rests on, and holds no detectable change or blind spot: a save's
verdicts decide its levels, and a comparison judges every row in full.
"""

from __future__ import annotations

import math
import statistics
from statistics import NormalDist

from pytest_hpml.compare import modes
from pytest_hpml.compare.basis import relative_change, within_tolerance_words
from pytest_hpml.compare.evidence import series
from pytest_hpml.compare.noise import SPEED_UNITS, estimate, pct
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.results import Metric, Replicates, Verdict

#: What the screened verdicts say they rest on.
SCREENED = "a save weighs a row's noise in full only where a change could start a new level"


def screened(current: Metric, now: Replicates, base: Stored, rules: Rules) -> Verdict | None:
    """The verdict of a measured metric against its evidence `base` (in its unit and direction)
    where it cannot be a new level; None where only the full judgement can tell."""
    if current.exact or base.exact or base.seeded_from or not current.compared:
        return None
    everything = [*base.runs, *now.values]
    if not all(v > 0 and math.isfinite(v) for v in everything) or \
            modes.could_hold_modes(everything):
        return None  # modes are judged from, not as measured
    found = series(now, base)
    changes = [relative_change(statistics.median(e.history), statistics.median(e.now))
               for e in found if e.history and e.now]
    if len(changes) < len(found):
        return None
    tol = rules.tolerance_of(current, base)
    raw = changes[0]
    if all(abs(c) <= tol for c in changes):
        return said("unchanged", within_tolerance_words(tol), current, base, now.value, raw,
                    len(now.values))
    if len(found) > 1 or raw <= -1:
        return None  # which series the verdict rests on takes the judgement
    e = found[0]
    drift = rules.drift if current.unit in SPEED_UNITS else 0.0
    noise = estimate(e.history, e.saves, e.now, 0.0, drift)
    variance = noise.drift_var
    if noise.between is not None:
        variance += noise.between ** 2 * (1 / noise.runs_now + 1 / noise.runs_before)
    floor = max(tol, math.expm1(NormalDist().inv_cdf(1 - rules.alpha) * math.sqrt(variance)))
    if abs(math.log1p(raw)) > math.log1p(floor):
        return None
    return said("ambiguous", f"{raw:+.1%}, within the {pct(floor)} this machine's spread lets "
                             "no change below be caught", current, base, now.value, raw,
                len(now.values))


def said(outcome: str, what: str, current: Metric, base: Stored, value: float, change: float,
         processes: int, reference: float | None = None) -> Verdict:
    """A screened verdict: `what` it rests on, with no detectable change or blind spot;
    `reference`: base.reference, where the caller has it."""
    return Verdict(outcome, current.unit, base.reference if reference is None else reference,
                   value, change, basis=f"{what}; {SCREENED}", processes=processes,
                   accepted=base.last_accepted())
