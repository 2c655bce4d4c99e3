"""Which tests a save measures again in fresh processes, and when: the spread between processes
is what a verdict weighs a change against, and a save that measured every test three times
cost 3.5x a plain run. A save now adds fresh processes within a budget (a fraction of the run's
own time, --hpml-save-budget), in rounds: each round is one fresh process that runs a batch of
tests (the per-process start-up, seconds of imports in a real project, paid once per batch, not
once per test), the tests whose stored history knows least of that spread first. Whatever one
save leaves out, the next one measures: every push to main is a save, and the history learns
the spread between processes and between occasions from all of them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from pytest_hpml.compare.stored import Stored

#: Seconds a fresh process is assumed to need beyond its tests until one has been timed.
ASSUMED_START = 1.0
#: Seconds a save may spend on fresh processes whatever the run's own time: a short suite's
#: share (a one-test run of 3 s, whose 0.4 was gone once the forkserver had been waited for)
#: left its baseline one process, which knows nothing of the spread between processes
#: (measured here: that process's time relative to the compute pace read 9 % above the median
#: of ten later processes of the same code, which spread by 3 %). A suite of ten seconds or
#: more has this much in its own share.
MIN_BUDGET = 3.0


def budget(fraction: float, own: float, spent: float, least: float = MIN_BUDGET) -> float:
    """Seconds a save's fresh processes may take: `fraction` of the run's `own` time, less what
    was `spent` on them already (waiting for the forkserver), and `least` at least (floor())."""
    if math.isinf(fraction):
        return math.inf
    return max(least, fraction * own - spent)


def floor(known: Iterable[int]) -> float:
    """The least a save may spend on fresh processes, given what each of its tests' histories
    knows of the spread between processes (knowledge()): MIN_BUDGET while any knows nothing of
    it (no save measured the test in more than one process: its one process is checked by
    nothing), nothing once every one knows some. From then on each save is another process on
    another occasion, and the spread between saves holds the spread between processes: a team
    saving on every push pays the run's share only."""
    return MIN_BUDGET if any(n < 1 for n in known) else 0.0


def knowledge(stored: Iterable[Stored]) -> int:
    """How much a test's stored metrics know of the spread between processes: the degrees of
    freedom of the saves that measured them in more than one process (0: none, or a new
    test)."""
    found = [sum(c - 1 for c in (m.history_saves or []) if c > 1) for m in stored]
    return min(found) if found else 0


@dataclass
class Plan:
    """A save's extra processes: the batches run so far and what they cost."""

    budget: float  # seconds the extra processes may take
    spent: float = 0.0
    start: float = ASSUMED_START  # seconds a fresh process needs beyond its tests
    rounds: list[list[str]] = field(default_factory=list)

    def next_batch(self, tests: list[str], duration: Callable[[str], float]) -> list[str]:
        """The tests of the next round, in priority order (`tests`), that fit in what is left
        of the budget with one process's start-up; the process runs them in this order and is
        stopped when the budget is spent, so a start-up longer than assumed costs the last
        tests of the batch, never more time."""
        left = self.budget - self.spent - self.start
        batch = []
        for test in tests:
            cost = duration(test)
            if cost <= left:
                batch.append(test)
                left -= cost
        return batch

    def ran(self, batch: list[str], seconds: float, tests_seconds: float) -> None:
        """A round ran: its cost counts, and its start-up is what the next one assumes."""
        self.rounds.append(batch)
        self.spent += seconds
        self.start = max(0.0, seconds - tests_seconds)


def order(tests: Iterable[str], known: Callable[[str], int],
          duration: Callable[[str], float]) -> list[str]:
    """The tests by priority: those whose history knows least of the spread between processes
    first (a new test knows nothing), then the quicker ones (more tests per second)."""
    return sorted(tests, key=lambda t: (known(t), duration(t), t))
