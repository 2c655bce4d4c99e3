"""What a run says while its fresh processes run (confirmations, a save's further processes,
processes at a git ref): on a terminal, one live line naming the tests, the process of how many
and the time left in the budget, left as one line when they are done; in a CI log (no
terminal), one line for each batch that took longer than a few seconds, nothing for the quick
ones. An xdist worker has no terminal of its own and says nothing."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

#: A batch of fresh processes that took longer is said in a CI log.
SLOW_SECONDS = 3.0


def _tests(nodeids: list[str]) -> str:
    first = nodeids[0].rsplit("/", 1)[-1] if nodeids else "no test"
    return first if len(nodeids) <= 1 else f"{first} and {len(nodeids) - 1} more"


class FreshProgress:
    def __init__(self, config: pytest.Config, what: str, nodeids: list[str], processes: int,
                 deadline: float | None, now: Callable[[], float] = time.monotonic) -> None:
        worker = hasattr(config, "workerinput")
        self._tr = None if worker else config.pluginmanager.get_plugin("terminalreporter")
        self._live = bool(self._tr is not None and self._tr.isatty)
        self._label = f"{what} of {_tests(nodeids)}"
        self._processes, self._deadline, self._now = processes, deadline, now
        self._started = now()
        if self._live:
            self._tr.ensure_newline()

    def starting(self, index: int) -> None:
        """Process `index` (from 0) is about to start."""
        if not self._live:
            return
        left = ""
        if self._deadline is not None:
            left = f", {max(0.0, self._deadline - self._now()):.0f} s left in the budget"
        self._tr.rewrite(f"hpml: {self._label}: process {index + 1} of {self._processes}"
                         f"{left}", erase=True)

    def done(self) -> None:
        seconds = self._now() - self._started
        line = f"hpml: {self._label}: {self._processes} process(es) in {seconds:.1f} s"
        if self._live:
            self._tr.rewrite(line, erase=True)
            self._tr.line("")
        elif self._tr is not None and seconds >= SLOW_SECONDS:
            self._tr.ensure_newline()
            self._tr.write_line(line)
