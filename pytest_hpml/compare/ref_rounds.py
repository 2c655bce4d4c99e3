"""Which of --hpml-compare-ref's regressions are measured in more pairs of processes before
they fail (a part of the compare stage, used by base_ref.py): after N processes a side, one
within MARGIN times its detectable change, or whose processes part like a process's speed
modes, is measured until 2N-1 a side while it still points the worse way."""

from __future__ import annotations

import math
from collections.abc import Iterator

from pytest_hpml.compare import evidence, modes, settling
from pytest_hpml.compare.detectable import beyond
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.results import Metric, Record, Verdict


def _regressions(record: Record) -> Iterator[tuple[str, Verdict, Metric]]:
    """The row's regressions more processes could undo, by metric name: of a figure that is
    not exact (an exact one is the same in every process)."""
    for name, v in record.verdicts.items():
        m = record.metric(name)
        if v.outcome == "regressed" and m is not None and not m.exact:
            yield name, v, m


def regressed(record: Record) -> bool:
    """Whether the row holds a regression more processes could undo."""
    return any(True for _ in _regressions(record))


#: How far past its detectable change (in logs) a regression of three processes a side must
#: lie to fail without more pairs.
MARGIN = 1.5


def marginal(record: Record) -> bool:
    """Whether a regression of the row lies within MARGIN times its detectable change, weighed
    in logs as the engine weighs a change against it (detectable.beyond)."""
    return any(v.change is not None and v.mdc is not None and v.mdc > 0 and
               not beyond(v.change, math.expm1(MARGIN * math.log1p(v.mdc)))
               for _, v, _ in _regressions(record))


def parted_like_modes(record: Record, stored: dict[str, Stored], rules: Rules) -> bool:
    """Whether a regression of the row rests on processes that fall into modes, both sides'
    together (compare/modes.py): levels far apart against the spread within each, as a
    process's mode makes them, and as a change of a quiet benchmark does. The least gap is
    the rules' for one occasion, or half the metric's tolerance where that is less: a
    regression is a median past the tolerance, and the nearest processes of two modes just
    past it lie closer than their medians (+10.3 %, +11.5 %, +9.5 % against processes within
    0.7 % of each other, a 10 % tolerance: the modes' own gap was never reached). Asked of the
    values the verdict rests on: as measured, or relative to the yardstick or the compute pace
    (+11.5 % against the pace on processes 3 % apart, where as measured they spread by 20 %)."""
    for name, v, m in _regressions(record):
        base = stored.get(name)
        if base is None:
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
