"""Whether the machine's yardstick (or its compute pace) tracks a metric: only where dividing
by it clearly narrows the spread of the same code's values did the machine's speed move the
metric with it, and only there may a verdict rest on the values relative to it (a part of the
compare stage, used by evidence.py)."""

from __future__ import annotations

import math

from pytest_hpml.compare.noise import logs, pct
from pytest_hpml.measure.stats import float_stdev, squares_within

#: Runs (stored and current, each as measured and relative) before the yardstick may be used.
MIN_TRACKING_RUNS = 6
#: The relative values must spread at most this share of the values as measured.
TRACKING_RATIO = 0.7


def yardstick_tracks(measured: list[float], relative: list[float],
                     name: str = "the yardstick") -> tuple[bool, str]:
    """Whether the yardstick tracks a metric, from pairs of its runs (each run's value as
    measured and relative to that run's yardstick, oldest first): only where dividing by the
    yardstick clearly narrows the spread over enough runs did the machine's drift move the
    metric with the yardstick. Where it does not (a compute-bound call, a sleep, a yardstick
    disturbed on its own), judging relative to it would add the yardstick's moves to the
    metric's: the -41.5 % "improvement" of a 12 % slower sort. Returns the decision in words."""
    pairs = [(a, b) for a, b in zip(measured, relative, strict=False) if a > 0 and b > 0]
    if len(pairs) < MIN_TRACKING_RUNS:
        return False, (f"{len(pairs)} runs timed {name}, {MIN_TRACKING_RUNS} are needed "
                       "to see whether it tracks this metric")
    raw = float_stdev([math.log(a) for a, _ in pairs])
    rel = float_stdev([math.log(b) for _, b in pairs])
    said = (f"spread {pct(rel)} relative to it against {pct(raw)} as measured over "
            f"{len(pairs)} runs")
    if raw > 0 and rel <= TRACKING_RATIO * raw:
        return True, f"{name} tracks this metric ({said})"
    return False, f"{name} does not track this metric ({said})"


#: Degrees of freedom between processes of one occasion before they may show it, ...
MIN_TRACKING_DOF = 3
#: ... and the spread between them as measured must be at least this (in logs): processes
#: that all ran at one speed show nothing of what the yardstick explains.
MIN_OCCASION_SPREAD = 0.05


def yardstick_tracks_together(measured: list[list[float]], relative: list[list[float]],
                              name: str = "the yardstick", ratio: float = TRACKING_RATIO,
                              min_dof: int = MIN_TRACKING_DOF) -> tuple[bool, str] | None:
    """Whether the yardstick tracks a metric, from processes measured together (each save's,
    and this run's; each group's values as measured and relative to their yardstick): within
    an occasion the code is the same, so a change of the code cannot pass for the yardstick's
    spread, nor hide it. Over all runs it does: a real 50 % slowdown of a call that the pace
    tracks within 3 % widened the paced values (21.5 %) as much as those as measured (22.8 %).
    None where the occasions show too little to tell (fewer than `min_dof` degrees of
    freedom, or a spread as measured under MIN_OCCASION_SPREAD); tracks where the relative
    spread is at most `ratio` of it."""
    raw_squares, dof = squares_within([logs(g) for g in measured])
    rel_squares, rel_dof = squares_within([logs(g) for g in relative])
    if dof < min_dof or rel_dof != dof:
        return None
    raw, rel = math.sqrt(raw_squares / dof), math.sqrt(rel_squares / dof)
    if raw < MIN_OCCASION_SPREAD:
        return None
    said = (f"spread {pct(rel)} relative to it against {pct(raw)} as measured between "
            f"processes run together, {dof} degrees of freedom")
    if rel <= ratio * raw:
        return True, f"{name} tracks this metric ({said})"
    return False, f"{name} does not track this metric ({said})"
