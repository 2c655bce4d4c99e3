"""What a run says while its fresh processes run (confirmations, a save's further processes,
processes at a git ref): on a terminal, one live line naming the tests, the process of how many
and the time left in the budget, left as one line when they are done; in a CI log (no
terminal), one line for each batch that took longer than a few seconds, nothing for the quick
ones. An xdist worker has no terminal of its own: its slow batches ride on the report of the
test they belong to (report.hpml_progress), and the controller says them as that report
arrives, naming the worker. While the batch runs, the worker sends each "process i of n"
line to the controller live, on the one channel xdist gives a worker mid-test (its warnings:
a ProgressNote), and a controller on a terminal draws it as its own live line and keeps it
out of the warnings summary."""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from typing import Any

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
    if node.config.stash.get(_DRAWN, False):
        return  # said live already, on the terminal
    worker = getattr(getattr(node, "gateway", None), "id", "worker")
    tr.ensure_newline()
    for line in lines:
        tr.write_line(line.replace("hpml: ", f"hpml: [{worker}] ", 1))


class ProgressNote(UserWarning):
    """An xdist worker's live progress line on its way to the controller (not a warning: the
    controller draws it and takes it out of the warnings summary). args: (line, done)."""


def _interactor(config: pytest.Config) -> Any | None:
    """The xdist worker's channel to its controller (its WorkerInteractor plugin)."""
    for plugin in config.pluginmanager.get_plugins():
        if type(plugin).__name__ == "WorkerInteractor" and hasattr(plugin, "sendevent"):
            return plugin
    return None


def send_live(interactor: Any, nodeid: str, line: str, done: bool = False) -> None:
    """Send `line` to the controller now, as xdist sends a worker's warning. An xdist whose
    channel differs gets nothing: the line of a slow batch still rides on the test's report."""
    try:
        from xdist.remote import serialize_warning_message

        note = warnings.WarningMessage(ProgressNote(line, done), ProgressNote, __file__, 0)
        interactor.sendevent("warning_recorded",
                             warning_message_data=serialize_warning_message(note),
                             when="runtest", nodeid=nodeid, location=None)
    except (ImportError, AttributeError, TypeError):
        pass


@pytest.hookimpl(trylast=True)  # after the terminal reporter has counted it as a warning
def pytest_warning_recorded(warning_message: warnings.WarningMessage, nodeid: str,
                            when: str) -> None:
    note = warning_message.message
    if not isinstance(note, ProgressNote):
        return
    config = _CONTROLLER[0] if _CONTROLLER else None
    tr = config.pluginmanager.get_plugin("terminalreporter") if config else None
    if tr is None:
        return
    said = tr.stats.get("warnings", [])
    said[:] = [r for r in said if ProgressNote.__name__ not in str(r.message)]
    if not said:
        tr.stats.pop("warnings", None)
    if not tr.isatty:
        return  # a CI log: the report of the test says a slow batch once it has ended
    line, done = (note.args + (False,))[:2]
    if not config.stash.get(_LIVE, False) and \
            getattr(getattr(tr, "_tw", None), "width_of_current_line", 0):
        tr.line("")  # the dots so far stay on their line
    config.stash[_LIVE] = not done
    config.stash[_DRAWN] = True  # the reports' lines of slow batches would say it again
    tr.rewrite(str(line), erase=True)
    if done:  # left as one line, as in a run without workers; the dots go on below it
        tr.line("")


_CONTROLLER: list[pytest.Config] = []  # the process's outermost run, which draws the lines
_LIVE = pytest.StashKey[bool]()  # a worker's live line is on the controller's terminal
_DRAWN = pytest.StashKey[bool]()  # the controller has drawn its workers' lines live


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):
        _CONTROLLER.insert(0, config)


def pytest_unconfigure(config: pytest.Config) -> None:
    if config in _CONTROLLER:
        _CONTROLLER.remove(config)


class FreshProgress:
    def __init__(self, config: pytest.Config, what: str, nodeids: list[str], processes: int,
                 deadline: float | None, now: Callable[[], float] = time.monotonic) -> None:
        self._config = config
        self._worker = hasattr(config, "workerinput")
        self._tr = None if self._worker else config.pluginmanager.get_plugin("terminalreporter")
        self._live = bool(self._tr is not None and self._tr.isatty)
        # An xdist worker sends its live line to the controller (which draws it on a terminal).
        self._remote = _interactor(config) if self._worker else None
        self._nodeid = nodeids[0] if nodeids else ""
        self._worker_id = getattr(config, "workerinput", {}).get("workerid", "worker")
        self._label = f"{what} of {_tests(nodeids)}"
        self._processes, self._deadline, self._now = processes, deadline, now
        self._started = now()
        if self._live:
            self._tr.ensure_newline()

    def starting(self, index: int) -> None:
        """Process `index` (from 0) is about to start."""
        if not (self._live or self._remote):
            return
        left = ""
        if self._deadline is not None:
            left = f", {max(0.0, self._deadline - self._now()):.0f} s left in the budget"
        line = f"hpml: {self._label}: process {index + 1} of {self._processes}{left}"
        if self._remote is not None:
            send_live(self._remote, self._nodeid,
                      line.replace("hpml: ", f"hpml: [{self._worker_id}] ", 1))
        else:
            self._tr.rewrite(line, erase=True)

    def done(self) -> None:
        seconds = self._now() - self._started
        line = f"hpml: {self._label}: {self._processes} process(es) in {seconds:.1f} s"
        if self._remote is not None:
            send_live(self._remote, self._nodeid,
                      line.replace("hpml: ", f"hpml: [{self._worker_id}] ", 1), done=True)
        if self._live:
            self._tr.rewrite(line, erase=True)
            self._tr.line("")
        elif self._tr is not None and seconds >= SLOW_SECONDS:
            self._tr.ensure_newline()
            self._tr.write_line(line)
        elif self._worker and seconds >= SLOW_SECONDS:
            self._config.stash.setdefault(_PENDING, []).append(line)
