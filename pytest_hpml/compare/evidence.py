"""The series of process values a verdict can rest on: the values as measured, relative to the
machine's yardstick (a memcpy timed between the samples) and relative to its compute pace (a
fixed loop timed after each chunk of them); whether each tracks the metric; and whether the
levels a metric's processes landed at are its own modes or the machine's speeds. A part of the
compare stage, used by verdicts.py.

A yardstick tracks a metric where dividing by it narrows the spread: between processes run
together (each save's, this run's), where the code is the same and a change of it cannot blur
the picture, else over all the runs that timed it (tracking.yardstick_tracks).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pytest_hpml.compare import modes
from pytest_hpml.compare.noise import Noise, occasions
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.tracking import (
    MIN_TRACKING_RUNS,
    yardstick_tracks,
    yardstick_tracks_together,
)
from pytest_hpml.replicates import Replicates

#: The labels of the series relative to the yardstick and to the compute pace.
RELATIVE = "relative to the machine's yardstick"
PACED = "relative to the machine's compute pace"


@dataclass
class Evidence:
    """One series of process values a verdict can rest on, and what it shows."""

    label: str  # "" for the values as measured
    history: list[float]  # the baseline's runs
    saves: list[int] | None  # values each save added to the history, oldest first
    now: list[float]  # this run's processes, the test's own first
    # How many consecutive saves each occasion holds (Stored.saves_together; None: one each).
    saves_together: list[int] | None = None
    change: float = 0.0
    mdc: float = math.inf
    noise: Noise | None = None
    # Shown to track the metric between processes run together, this run's own among them
    # (tracking): the values moved with the yardstick within this very run.
    together: bool = False


def series(now: Replicates, base: Stored) -> list[Evidence]:
    """The values as measured, and, when both sides timed the machine's yardstick, the values
    relative to it (their history is the tail of the one as measured, save for save)."""
    saves = base.history_saves if base.history else None
    together = base.saves_together
    found = [Evidence("", base.runs, saves, list(now.values), together)]
    base_relative = base.relative_history or ([base.relative] if base.relative else None)
    if now.relative is not None and base_relative:
        found.append(Evidence(RELATIVE, list(base_relative), saves, list(now.relative),
                              together))
    if now.paced is not None and base.paced_history:
        found.append(Evidence(PACED, list(base.paced_history), saves, list(now.paced),
                              together))
    return found


def tracking(raw: Evidence, rel: Evidence) -> tuple[bool, str]:
    """Whether the yardstick (or the compute pace) tracks the metric: between processes run
    together (each save's, this run's), where a change of the code cannot blur it, else over
    the runs that timed it (the stored ones, the tail of the history, and this run's
    processes), each as measured and relative. A compute pace not yet seen over enough runs is
    not said."""
    stored = min(len(raw.history), len(rel.history))
    now = len(rel.now) if len(rel.now) == len(raw.now) else 1
    measured = raw.history[len(raw.history) - stored:] + raw.now[:now]
    relative = rel.history[len(rel.history) - stored:] + rel.now[:now]
    name = "the compute pace" if rel.label == PACED else "the yardstick"
    together = yardstick_tracks_together(
        [*occasions(measured[:stored], raw.saves), measured[stored:]],
        [*occasions(relative[:stored], rel.saves), relative[stored:]], name)
    if together is not None and together[0]:
        rel.together = _moved_with_it_now(measured[stored:], relative[stored:])
        return together
    if rel.label == PACED and len(measured) < MIN_TRACKING_RUNS:
        return together or (False, "")
    whole = yardstick_tracks(measured, relative, name)
    return together if together is not None and not whole[0] else whole


#: This run's own processes moved with the yardstick where relative to it they spread at most
#: this share of their spread as measured (stricter than the tracking rule: two degrees of
#: freedom at least, not three).
NOW_RATIO = 0.5


def _moved_with_it_now(measured: list[float], relative: list[float]) -> bool:
    """Whether this run's own processes, at different speeds of the machine (5 % apart at
    least), moved with the yardstick: then a verdict relative to it is not a yardstick that
    moved on its own since the save (a history that tracked it says nothing of this run)."""
    found = yardstick_tracks_together([measured], [relative], ratio=NOW_RATIO, min_dof=2)
    return found is not None and found[0]


def machine_modes(base: Stored, now: Replicates, gap: float = modes.MODE_GAP
                  ) -> modes.Modal | None:
    """The modes of the metric's processes, unless they are the machine's: on a core that
    runs at two speeds by turns, a compute-bound call's processes land at two levels (50 %
    more work: 25.1, 18.7 and 25.6 ms against a save's 15.2 to 16.8), which the time relative
    to its pace does not show (22.1 to 23.3, one level): no switch of modes to hold back."""
    found = modes.modal([v for v in base.runs if math.isfinite(v)], list(now.values), gap)
    if found is None or not base.paced_history or now.paced is None or \
            len(base.paced_history) != len(base.runs) or len(now.paced) != len(now.values):
        return found
    by_pace = modes.modal(list(base.paced_history), list(now.paced), gap)
    if by_pace is None or (len(by_pace.stored) < 2 and not (by_pace.new and by_pace.now >= 2)):
        return None
    return found
