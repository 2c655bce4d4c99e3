"""Whether a change lies beyond what the noise lets this machine detect, and whether fresh
processes could make it so (a part of the compare stage, used by verdicts.py and arrays.py)."""

from __future__ import annotations

import math

from pytest_hpml.compare.noise import Noise


def beyond(change: float, mdc: float) -> bool:
    """Whether a relative change exceeds the detectable one, weighed in logs as the noise is: a
    5x speed-up (-80 %) is as far from noise as a 5x slow-down (+400 %), and a time and the
    rate derived from it are caught together."""
    if change <= -1:
        return True  # a value that fell to zero or below: beyond any noise of a ratio
    return abs(math.log1p(change)) > math.log1p(mdc)


def confirms(n: Noise | None, change: float, mdc: float, processes: int, extra: int,
             tol: float, alpha: float) -> bool:
    """Whether a worse `change` beyond the tolerance, seen in `processes` so far, is measured
    again in `extra` fresh processes: where more than one process showed it, where it is
    caught already, or where they could bring the detectable change below it."""
    return processes > 1 or beyond(change, mdc) or _confirmation_could_catch(
        n, change, processes, extra, tol, alpha)


def _confirmation_could_catch(n: Noise | None, change: float, processes: int, extra: int,
                              tol: float, alpha: float) -> bool:
    """Whether up to `extra` more processes, as noisy as those seen so far, could bring the
    detectable change below this change: if not, running them would only cost time. Each count
    is asked, not only the most: where a learned drift is left, more processes can widen the
    detectable change (noise.Noise.processes_for), so one more may catch what three would not."""
    if n is None:
        return True
    if n.between is None and not n.pooled_drift:
        return True  # the spread between processes is unknown until they run
    if n.between is None:
        # The spread between processes is unknown until they run; the drift between occasions
        # a sweep's rows have shown is not, and no number of processes lowers what it hides.
        return beyond(change, n.drift_mdc(tol, alpha))
    return any(beyond(change, n.mdc(tol, alpha, runs_now=processes + more, extra_dof=more))
               for more in range(1, extra + 1))
