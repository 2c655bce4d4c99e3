"""What a run says while its fresh processes run (confirmations, a save's further processes,
processes at a git ref): on a terminal, one live line naming the tests, the process of how many
and the time left in the budget, left as one line when they are done; in a CI log (no
terminal), one line for each batch that took longer than a few seconds, nothing for the quick
ones. An xdist worker has no terminal of its own: its slow batches ride on the report of the
test they belong to (report.hpml_progress), and the controller says them as that report
arrives, naming the worker."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

#: A batch of fresh processes that took longer is said in a CI log.
SLOW_SECONDS = 3.0


def _tests(nodeids: list[str]) -> str:
    first = nodeids[0].rsplit("/", 1)[-1] if nodeids else "no test"
    return first if len(nodeids) <= 1 else f"{first} and {len(nodeids) - 1} more"


_PENDING = pytest.StashKey[list[str]]()


def take(config: pytest.Config) -> list[str]:
    """An xdist worker's lines said since the last call, for the report they travel with."""
    lines = config.stash.get(_PENDING, [])
    config.stash[_PENDING] = []
    return lines


@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    lines = getattr(report, "hpml_progress", None)
    node = getattr(report, "node", None)  # xdist: the worker the report came from
    if not lines or node is None:
        return
    tr = node.config.pluginmanager.get_plugin("terminalreporter")
    if tr is None:
        return
    worker = getattr(getattr(node, "gateway", None), "id", "worker")
    tr.ensure_newline()
    for line in lines:
        tr.write_line(line.replace("hpml: ", f"hpml: [{worker}] ", 1))


class FreshProgress:
    def __init__(self, config: pytest.Config, what: str, nodeids: list[str], processes: int,
                 deadline: float | None, now: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._worker = hasattr(config, "workerinput")
        self._tr = None if self._worker else config.pluginmanager.get_plugin("terminalreporter")
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
        elif self._worker and seconds >= SLOW_SECONDS:
            self._config.stash.setdefault(_PENDING, []).append(line)
