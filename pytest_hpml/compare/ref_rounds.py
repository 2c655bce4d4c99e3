"""Which of --hpml-compare-ref's regressions are measured in more pairs of processes before
they fail (a part of the compare stage, used by base_ref.py): after N processes a side, one
within MARGIN times its detectable change, or whose processes part like a process's speed
modes, is measured until 2N-1 a side while it still points the worse way."""

from __future__ import annotations

import math

from pytest_hpml.compare import evidence, modes, settling
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.results import Record


def regressed(record: Record) -> bool:
    """Whether the row holds a regression more processes could undo (a figure that is not
    exact: an exact one is the same in every process)."""
    return any(v.outcome == "regressed" and not (m is not None and m.exact)
               for name, v in record.verdicts.items() for m in [record.metric(name)])


#: How far past its detectable change (in logs) a regression of three processes a side must
#: lie to fail without more pairs.
MARGIN = 1.5


def marginal(record: Record) -> bool:
    """Whether a regression of the row lies within MARGIN times its detectable change (a
    figure that is not exact)."""
    for name, v in record.verdicts.items():
        m = record.metric(name)
        if v.outcome != "regressed" or m is None or m.exact or v.change is None or \
                v.mdc is None or not (v.change > -1 and v.mdc > 0):
            continue
        if math.log1p(abs(v.change)) <= MARGIN * math.log1p(v.mdc):
            return True
    return False


def parted_like_modes(record: Record, stored: dict[str, Stored], rules: Rules
                       ) -> bool:
    """Whether a regression of the row rests on processes that fall into modes, both sides'
    together (compare/modes.py): levels far apart against the spread within each, as a
    process's mode makes them, and as a change of a quiet benchmark does. The least gap is
    the rules' for one occasion, or half the metric's tolerance where that is less: a
    regression is a median past the tolerance, and the nearest processes of two modes just
    past it lie closer than their medians (+10.3 %, +11.5 %, +9.5 % against processes within
    0.7 % of each other, a 10 % tolerance: the modes' own gap was never reached). Asked of the
    values the verdict rests on: as measured, or relative to the yardstick or the compute pace
    (+11.5 % against the pace on processes 3 % apart, where as measured they spread by 20 %)."""
    for name, v in record.verdicts.items():
        m, base = record.metric(name), stored.get(name)
        if v.outcome != "regressed" or m is None or m.exact or base is None:
            continue
        gap = min(rules.mode_gap, math.log1p(rules.tolerance_of(m, base)) / 2) or \
            rules.mode_gap
        for e in evidence.series(record.values_of(name), base):
            if bool(e.label) == v.relative and len(modes.split([*e.history, *e.now], gap)) >= 2:
                return True
    return False


def unsettled_the_worse_way(record: Record) -> bool:
    """Whether more pairs could change a verdict of the row that points the worse way."""
    return settling.unsettled(record, worse_only=True)
