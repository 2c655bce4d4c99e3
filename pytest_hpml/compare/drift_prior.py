"""The drift a metric is assumed to have between occasions until its own history learns it,
from what the baseline's other metrics learned (a part of the compare stage, used by the
stored baseline's comparison and by `python -m pytest_hpml compare`).

--hpml-drift (5 %) is a guess made for any machine. A baseline whose metrics have each been
saved on three occasions or more knows this machine's drift: a new test, or a metric whose
history restarted at an accepted level, is assumed to drift as the median of those metrics
does, where that is more than --hpml-drift (a machine that drifts less still assumes
--hpml-drift: one metric's drift is not another's, and the guess stays the floor). The median
is robust to the few metrics of their own (a sleep, an I/O wait) that drift far more or less.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from dataclasses import replace
from typing import TypeVar

from pytest_hpml.compare.baselines import Baseline
from pytest_hpml.compare.noise import SPEED_UNITS, estimate
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules

#: Rows whose metrics are asked, at most, spread over the file (a 10 000-row sweep's every row
#: would cost a tenth of a second for a median that a few hundred give).
SAMPLED_ROWS = 300
T = TypeVar("T")
#: Metrics that must have learned their drift before their median is the machine's.
MIN_METRICS = 3


def learned(metrics: Iterable[Stored]) -> tuple[float, int] | None:
    """The median drift (relative: 0.12 is 12 %) that the times and rates of `metrics` learned
    from saves of three occasions or more, and how many learned it; None for fewer than
    MIN_METRICS."""
    drifts = []
    for m in metrics:
        if m.unit not in SPEED_UNITS or not m.history or not m.history_saves:
            continue
        noise = estimate(m.history, m.history_saves, [], 0.0, 0.0, m.saves_together)
        if noise.drift_dof and not noise.hour_drift:
            drifts.append(noise.drift)
    if len(drifts) < MIN_METRICS:
        return None
    return math.expm1(statistics.median(drifts)), len(drifts)


def sampled(rows: list[str], metrics_for: Callable[[str], dict[str, Stored]]
            ) -> Iterable[Stored]:
    """The metrics of at most SAMPLED_ROWS of `rows`, taken evenly over them (a file's rows
    lie test by test: the first few hundred would be one sweep's)."""
    for rid in spread_over(rows):
        yield from metrics_for(rid).values()


def spread_over(items: list[T]) -> list[T]:
    """At most SAMPLED_ROWS of `items`, taken evenly over them."""
    return items[::max(1, math.ceil(len(items) / SAMPLED_ROWS))]


def with_machine_drift(rules: Rules, metrics: Iterable[Stored]) -> Rules:
    """`rules` assuming the drift `metrics` learned (their median) where it is more than
    theirs; `rules` as they are where the drift is off (--hpml-drift=0) or nothing was
    learned."""
    if rules.drift <= 0:
        return rules
    found = learned(metrics)
    if found is None or found[0] <= rules.drift:
        return rules
    return replace(rules, drift=found[0], drift_learned_by=found[1])


def of_baseline(rules: Rules, baseline: Baseline | None) -> Rules:
    """with_machine_drift of what `baseline`'s metrics learned (a sample of its rows)."""
    if baseline is None:
        return rules
    return with_machine_drift(rules, sampled(list(baseline.records), baseline.metrics_for))
