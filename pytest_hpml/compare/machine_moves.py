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
  calls kept its speed (within the tolerance), to a speed that the stored run's calls already
  ran at (between its 10th and 90th percentiles). The slow calls come in stretches where the
  machine runs at two speeds by turns, or scattered where the allocator's state or the memory
  layout makes some calls slow (orjson's dump of canada.json ran at 3.7 ms or 5.3 ms a call,
  and its median moved between 3.9 and 5.4 ms from run to run of the same code). A slow path
  the calls never took before (a median beyond the stored run's slow calls) is judged.
- the machine's compute pace: a fixed compute-bound loop timed between the samples (the
  yardstick's compute reference) that moved with the metric, so that relative to it what is
  left is within the tolerance; or within a quarter of the move for a call whose samples
  moved with the pace within the run itself (a memory-bound add keeps its speed while the
  loop slows: 50 % more work on it read +95 % while the pace moved +71 %, and the quarter
  rule alone held it back). A change beyond what the pace explains is judged, and so is
  every change of a metric whose history (six runs or more) shows the pace does not
  track it: a sleep's or an I/O wait's slowdown is not the pace's, whenever it comes.

A verdict held back is `ambiguous` with a blind spot, which --hpml-strict-blind-spots fails: a
slowdown that only the slow stretches suffer, or one that a slower machine hides, passes
unseen, and the row says so. A slowdown of every call on a machine at its usual pace is judged
as before.
"""

from __future__ import annotations

import math
from dataclasses import replace

from pytest_hpml.compare.stored import Stored
from pytest_hpml.measure.stats import deciles
from pytest_hpml.results import Metric, Verdict

#: The share of a move (in logs) that the machine's compute pace may leave unexplained.
UNEXPLAINED = 0.25


def _change(before: float, after: float) -> float:
    return (after - before) / before


def share_of_slow_calls(verdict: Verdict, current: Metric, base: Stored,
                        tol: float) -> str | None:
    """Why the move is a new share of the speeds the calls already had, not a new speed: the
    fast calls (the 10th percentile) kept their speed within the tolerance, and this run's
    median is a speed the stored run's calls already ran at (between its 10th and 90th
    percentiles, within the tolerance); None where it is not. A slow path the calls did not
    take before (a median beyond the stored run's slow calls) is judged."""
    stored, now = base.deciles, deciles(current.samples or [])
    if stored is None or now is None or min(*stored, *now, current.value) <= 0:
        return None
    fast = _change(stored[0], now[0])
    known = stored[0] * (1 - tol) <= current.value <= stored[1] * (1 + tol)
    if abs(fast) > tol or not known:
        return None
    return (f"the median moved {verdict.change:+.1%} while the fastest tenth of the calls "
            f"moved {fast:+.1%} ({stored[0]:.4g} -> {now[0]:.4g} s), and {current.value:.4g} "
            f"s is a speed the stored run's calls already had (its 10th to 90th percentile: "
            f"{stored[0]:.4g} to {stored[1]:.4g} s): the share of slow calls changed, not "
            "their speed")


def compute_pace(verdict: Verdict, current: Metric, base: Stored, tol: float) -> str | None:
    """Why the move is the machine's compute pace, timed beside the samples on both sides;
    None where the pace held or does not explain it. Each side's pace pairs its samples with
    the loop timed next to them (measure/yardstick.py), so a run's value over its pace is the
    time the code took at the pace of the moment."""
    before, now = base.compute_yardstick, current.compute_yardstick
    if not (before and now and before > 0 and now > 0) or verdict.change is None or \
            not (base.value > 0 and current.value > 0):
        return None
    own = _change(base.value, current.value)  # the test's own process against the stored run
    paced = _change(base.value / before, current.value / now)
    machine = (1 + own) / (1 + paced) - 1
    if abs(machine) <= tol or machine * verdict.change <= 0:
        return None
    # Code does not slow down by the loop's own factor in a slow stretch (measured: the loop
    # 1.77x, torch.rand 1.82x, cattrs' calls 1.75x to 1.95x): for a call whose samples moved
    # with the pace in its own run, what is left counts as explained within the tolerance or a
    # quarter of the move (in logs); for one not seen to (a run in one stretch shows nothing;
    # a memory-bound call keeps its speed while the loop slows), within the tolerance only.
    left = abs(math.log1p(paced))
    allowed = math.log1p(tol)
    if current.pace_tracked:
        allowed = max(allowed, UNEXPLAINED * abs(math.log1p(verdict.change)))
    pace = (f"the machine's compute pace (a fixed loop timed between the samples, "
            f"{before:.4g} -> {now:.4g} s) moved {machine:+.1%}")
    if paced * verdict.change < 0:
        # The machine moved further than the value did: relative to its pace the change
        # points the other way (20 % more work read -34 % in a stretch 45 % faster than the
        # save's), and a verdict in the measured direction would be the machine's, not the
        # code's.
        return f"{pace}, further than the value did: relative to it {paced:+.1%}, the other way"
    if allowed < left < abs(math.log1p(machine)) and len(base.runs) < 2:
        # One stored process, in another stretch of the machine than this run's, which moved
        # further than what it leaves: how far the metric follows the pace cannot be told from
        # one process. Pure-Python calls of unchanged code read +72 % to +107 % while the pace
        # moved +64 % (2026-11-28, 3 of 8 unchanged compares of a suite failed), as 50 % more
        # work on a memory-bound add reads +95 % with the pace +71 %: with a history of
        # processes the add's verdict stands. A move beyond the pace's (a nap 4x longer, the
        # pace +16.5 %) is judged.
        return (f"{pace} with it, which leaves {paced:+.1%}, and the baseline holds one "
                "process: how far this metric follows the pace is unknown until a save "
                "measures it in more")
    if left > allowed:
        return None
    return f"{pace} with it, which leaves {paced:+.1%}: the machine's move, not the code's"


def held_back(verdict: Verdict, current: Metric, base: Stored, tol: float,
              pace_tracks: bool | None = None) -> Verdict | None:
    """`verdict` (a regression, an improvement, or a suspected one, of a time) held back where
    one of the machine's moves explains it; None where none does. `pace_tracks`: what the
    metric's history says of the compute pace (None: too few runs to tell). Where the history
    shows the pace does not track the metric (a sleep, a call waiting on I/O), a move of the
    pace that coincides with a slowdown explains nothing: measured here, a sleep 50 % longer
    read +6.4 % relative to a pace that a CPU hog had moved +40.7 %, and was held back."""
    if current.unit != "s":
        return None
    said = share_of_slow_calls(verdict, current, base, tol) or (
        compute_pace(verdict, current, base, tol) if pace_tracks is not False else None)
    if said is None:
        return None
    said += "; not judged as a change of the code"
    return replace(verdict, outcome="ambiguous", basis=f"{said}; {verdict.basis}",
                   blind=f"{said}: a slowdown hidden by the machine's move cannot be seen "
                         "this run")
