"""Benchmarks whose processes land in one of a few modes: a JSON library's calls take about
2.5 ms in one process and 6.8 ms in the next (hash seeds, memory layout), so the median of a
process is one of two levels, and which one is chance. A baseline that saw only the fast mode,
and a comparison whose processes land in the slow one, would confirm a 2.7x "regression" of
unchanged code.

The modes are found where they show, in the values of processes (the stored runs, across every
save, and this run's): groups of two processes or more whose levels lie much farther apart (30 %
at least, and six times the spread inside the groups) than their members do. A benchmark whose
history holds several modes is judged against the mode nearest to each of this run's processes:
a process at a known mode is no change; one beyond every mode is measured from the nearest. A
run whose processes land in several modes where the history knows one has switched modes:
said, never failed, and the next save learns the new mode. Between the processes of one
occasion (--hpml-compare-ref) a narrower gap parts modes, as no drift between occasions can
pass for one there.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from pytest_hpml.measure.stats import squares_within

#: Modes lie at least this far apart (in logs: 30 %): the values of saves made on separate
#: occasions, hours apart, also gather at levels tens of percent apart (the machine's speed
#: moved between them), which are not modes.
MODE_GAP = math.log(1.3)
#: ... and the gap between them is at least this many times the spread inside them,
SEPARATION = 6.0
#: ... taken as 1 % at least (processes that agree to the digit tell nothing of it).
MIN_SPREAD = math.log(1.01)
#: Among the processes of one occasion (--hpml-compare-ref's two sides, measured in turns)
#: no drift parts them, and modes lie at least this far apart (in logs: 10 %): torch.add of
#: 100 000 elements took 14.5-14.8 us in most processes and 17.3-18.8 us in some, 23 % apart.
ONE_OCCASION_GAP = math.log(1.1)


def _logs(values: list[float]) -> list[float]:
    return sorted(math.log(v) for v in values if v > 0 and math.isfinite(v))


def _spread(groups: list[list[float]]) -> float | None:
    """The pooled standard deviation (in logs) inside the groups of two or more."""
    squares, dof = squares_within(groups)
    return math.sqrt(squares / dof) if dof else None


def split(values: list[float], gap: float = MODE_GAP) -> list[list[float]]:
    """`values` in groups of one mode each, lowest first (in logs); one group where there are
    no clear modes, or fewer than three values. `gap`: the least gap between modes, in logs."""
    logs = _logs(values)
    if not _could_part(logs, gap):
        return [logs] if logs else []
    return _split(logs, gap)


def could_hold_modes(values: list[float], gap: float = MODE_GAP) -> bool:
    """Whether split could find two modes or more in `values`: a cheap test of their extremes,
    which the level screen asks before it judges a metric as measured."""
    return _could_part(_logs(values), gap)


def _could_part(logs: list[float], gap: float) -> bool:
    """Whether the sorted logs hold a gap of `gap` with two values or more on each side:
    split's cuts lie only there (a mode is seen in two processes at least, and a cut beside a
    lone value is dropped), so without one the logs are one group."""
    return len(logs) >= 4 and logs[-2] - logs[1] >= gap


def _split(logs: list[float], least: float) -> list[list[float]]:
    """Cut the sorted logs at every gap wide enough to part modes: first every gap of
    `least` or more, then only those wider than SEPARATION times the spread inside the groups
    they leave, until the cuts hold (a mode's own spread is measured without the other modes
    inflating it)."""
    gaps = [b - a for a, b in zip(logs, logs[1:], strict=False)]
    cuts = {i for i, gap in enumerate(gaps) if gap >= least}
    while cuts:
        groups = _groups(logs, cuts)
        # A mode is seen in two processes at least: one process apart is an outlier, or a
        # change, and the verdict weighs it as such.
        lone = _lone_cuts(groups, cuts)
        if lone:
            cuts -= lone
            continue
        spread = max(_spread(groups) or 0.0, MIN_SPREAD)
        kept = {i for i in cuts if gaps[i] >= SEPARATION * spread}
        if kept == cuts:
            return groups
        cuts = kept
    return [logs]


def _lone_cuts(groups: list[list[float]], cuts: set[int]) -> set[int]:
    """The cuts beside a group of one value."""
    ordered = sorted(cuts)
    lone = set()
    for k, group in enumerate(groups):
        if len(group) < 2:
            lone |= {ordered[j] for j in (k - 1, k) if 0 <= j < len(ordered)}
    return lone


def _groups(logs: list[float], cuts: set[int]) -> list[list[float]]:
    groups, start = [], 0
    for i in sorted(cuts):
        groups.append(logs[start:i + 1])
        start = i + 1
    return groups + [logs[start:]]


@dataclass(frozen=True)
class Modal:
    """The modes of a metric's processes: the stored ones' levels, and where this run's
    processes land."""

    stored: list[float]  # the levels (geometric medians) of the modes the history holds
    now: int  # the modes this run's processes land in
    new: bool  # some of this run's processes land in a mode the history does not hold

    def nearest(self, value: float) -> float:
        """The stored mode's level nearest to `value` (in logs)."""
        return min(self.stored, key=lambda level: abs(math.log(level) - math.log(value)))

    def normalized(self, values: Sequence[float]) -> list[float]:
        """Each value measured from its nearest stored mode (a ratio to its level); a value
        that is not a positive number as it is."""
        return [v / self.nearest(v) if v > 0 and math.isfinite(v) else v for v in values]

    def describe(self) -> str:
        return ("modes at " + ", ".join(f"{level:.4g}" for level in self.stored))


def modal(history: list[float], now: list[float], gap: float = MODE_GAP) -> Modal | None:
    """The modes of the stored runs and this run's processes together; None where they show
    none (one group). `gap`: as split's."""
    groups = split(history + now, gap)
    if len(groups) < 2:
        return None
    stored_logs, now_logs = set(_logs(history)), _logs(now)

    def level(group: list[float]) -> float:
        return math.exp(statistics.median(group))

    stored = [level(g) for g in groups if any(x in stored_logs for x in g)]
    landed = [g for g in groups if any(x in now_logs for x in g)]
    new = any(not any(x in stored_logs for x in g) for g in landed)
    return Modal(stored, len(landed), new)
