"""The words a verdict's basis is made of (a part of the compare stage, used by verdicts.py,
compare/arrays.py and the level screen): the change and what the noise lets this machine
detect, in the order a reader of a failed comparison needs them; and relative_change, the
change every verdict measures."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pytest_hpml.compare import modes
from pytest_hpml.compare.noise import pct
from pytest_hpml.report.units import DETECTABLE_SHOWN_UP_TO, format_detectable


def relative_change(old: float, new: float) -> float:
    """The change from `old` to `new` as a share of `old` (infinite from a zero)."""
    if old == new:
        return 0.0
    if old == 0:
        return math.copysign(math.inf, new)
    return (new - old) / abs(old)


def seeded_basis(seeded_from: str) -> str:
    """Why a verdict against another tool's values (`seeded_from`) decides nothing."""
    return (f"the baseline is {seeded_from}: its between-run spread is unknown until "
            "pytest-hpml has saved its own runs (--hpml-save-baseline), and it was measured in "
            "another environment (the intra-op threads and malloc thresholds pytest-hpml does "
            "not set there), so its verdicts are not trusted: a slowdown is 'unconfirmed', a "
            "speed-up 'ambiguous', neither fails")


def suspected(change: float, processes: int, evidence: str) -> str:
    """The basis of a `suspect` verdict: the change so far, then what the noise is."""
    return f"{change:+.1%} in {processes} process(es) so far; {evidence}"


def caught_words(change: float, mdc: float, reference: float, now: Sequence[float],
                 evidence: str) -> str:
    """The basis of a change caught (`regressed` or `improved`): the change, the detectable
    one, each of this run's processes measured from the stored runs' median `reference`, then
    what the noise is (`evidence`)."""
    shown = ", ".join(f"{relative_change(reference, v):+.1%}" if math.isfinite(v)
                      else f"{v} (no number)" for v in now)
    return (f"{change:+.1%} beyond the {pct(mdc)} this machine can detect; {len(now)} "
            f"process(es): {shown}; {evidence}")


#: The basis of a changed metric with no better direction (a count, a size).
NO_DIRECTION = "no better direction: shown, never judged"


def within_tolerance(tol: float, evidence: str) -> str:
    """The basis of an `unchanged` verdict: the tolerance, then what the noise is (`evidence`)."""
    return f"{within_tolerance_words(tol)}; {evidence}"


def within_tolerance_words(tol: float) -> str:
    return f"within the {pct(tol)} tolerance"


def not_caught(change: float, mdc: float, evidence: str) -> str:
    """The basis of a change the noise hides (`ambiguous`): how large it would have to be (as
    a table shows it: the figure of a spread between 3 processes over 1 degree of freedom
    read as a number of 27 digits)."""
    needed = f"beyond {pct(mdc)}" if mdc <= DETECTABLE_SHOWN_UP_TO else format_detectable(mdc)
    return (f"{change:+.1%} cannot be told from this machine's noise: a change {needed} is "
            f"needed to be caught ({evidence})")


def bimodal_note(found: modes.Modal) -> str:
    """What a metric's modes add to its noise in words."""
    return (f"; bimodal: {found.describe()} (learned from the stored runs), each value measured "
            "from its nearest mode")
