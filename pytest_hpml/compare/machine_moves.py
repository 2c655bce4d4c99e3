"""Verdicts the machine's own moves explain, held back: said as what the run could not see, not
judged as a change of the code (a value of the compare stage, used by verdicts.py).

On a shared machine the code under test is not the only thing that changes between a save and
a compare. Measured here on 2026-11-27: a core shared with other work ran compute-bound calls
at two speeds by turns, for a few hundred milliseconds each (torch.rand of 2M floats 8.0 or
14.5 ms, a Python loop 0.60 or 1.07 ms), while a memory copy and a torch add kept their pace.
Unchanged code then read +61 % (a torch benchmark: 9.9 ms in the save, 16 ms in three
processes minutes later) and +75 % to +94 % (pure-Python serializers of a public suite), and
the fresh processes that confirm a regression ran in the same slow stretch and "confirmed" it.

Two moves are told apart from a change of the code, each from what the run itself measured:

- the share of slow calls: a median that moved beyond the noise while the fastest tenth of the
  calls kept its speed (within the tolerance), and whose slow samples came in stretches (the
  runs test, far below a random order). Slow calls scattered among fast ones are a code path
  some calls take: a move of their share is judged.
- the machine's compute pace: a fixed compute-bound loop timed between the samples (the
  yardstick's compute reference) that moved with the metric, so that relative to it the
  change is within the tolerance. A change beyond what the pace explains is judged.

A verdict held back is `ambiguous` with a blind spot, which --hpml-strict-blind-spots fails: a
slowdown that only the slow stretches suffer, or one that a slower machine hides, passes
unseen, and the row says so. A slowdown of every call on a machine at its usual pace is judged
as before.
"""

from __future__ import annotations

from dataclasses import replace

from pytest_hpml.compare.noise import pct
from pytest_hpml.compare.stored import Stored
from pytest_hpml.measure.stats import fastest_tenth, runs_z
from pytest_hpml.results import Metric, Verdict

#: The runs test's z below which a run's slow samples came in stretches (one chance in about
#: 750 for samples in a random order).
STRETCHES_Z = 3.0


def _change(before: float, after: float) -> float:
    return (after - before) / before


def share_of_slow_calls(verdict: Verdict, current: Metric, base: Stored,
                        tol: float) -> str | None:
    """Why the move is the share of slow stretches the run caught, not the speed of its
    calls; None where it is not."""
    stored, now = base.fast_calls, fastest_tenth(current.samples or [])
    if stored is None or now is None or not (stored > 0 and now > 0):
        return None
    fast = _change(stored, now)
    if abs(fast) > tol or runs_z(current.samples or []) > -STRETCHES_Z:
        return None
    return (f"the median moved {verdict.change:+.1%} while the fastest tenth of the calls "
            f"moved {fast:+.1%} ({stored:.4g} -> {now:.4g} s, within the {pct(tol)} "
            "tolerance), its slow calls in stretches: the share of slow calls changed, not "
            "their speed (a machine that runs them at two speeds by turns)")


def compute_pace(verdict: Verdict, current: Metric, base: Stored, tol: float) -> str | None:
    """Why the move is the machine's compute pace, timed beside the samples on both sides;
    None where the pace held or does not explain it."""
    before, now = base.compute_yardstick, current.compute_yardstick
    if not (before and now and before > 0 and now > 0) or verdict.change is None:
        return None
    machine = _change(before, now)
    paced = (1 + verdict.change) / (1 + machine) - 1
    if abs(machine) <= tol or machine * verdict.change <= 0 or abs(paced) > tol:
        return None
    return (f"the machine's compute pace (a fixed loop timed between the samples, "
            f"{before:.4g} -> {now:.4g} s) moved {machine:+.1%} with it: {paced:+.1%} "
            f"relative to it, within the {pct(tol)} tolerance")


def held_back(verdict: Verdict, current: Metric, base: Stored, tol: float) -> Verdict | None:
    """`verdict` (a regression, an improvement, or a suspected one, of a time) held back where
    one of the machine's moves explains it; None where none does."""
    if current.unit != "s":
        return None
    said = share_of_slow_calls(verdict, current, base, tol) or \
        compute_pace(verdict, current, base, tol)
    if said is None:
        return None
    said += "; not judged as a change of the code"
    return replace(verdict, outcome="ambiguous", basis=f"{said}; {verdict.basis}",
                   blind=f"{said}: a slowdown hidden by the machine's move cannot be seen "
                         "this run")
