"""SIGTERM and SIGHUP stop a run as Ctrl-C does (a pytest plugin module).

A cancelled CI job, a SLURM time limit or a closed terminal sends SIGTERM or SIGHUP, whose
default action ends the process on the spot: no report, no baseline merge, no summary, and a
confirmation rerun left running. Here either signal raises Terminated (a KeyboardInterrupt) in
the main thread, so pytest stops the session the way it stops on Ctrl-C: sessionfinish writes
the outputs of the tests that finished, the summary says the run was terminated, and the exit
status is pytest's INTERRUPTED (2). A confirmation rerun running at that moment is stopped
(pytest_hpml.rerun), and the forkserver ends when this process does.

Installed only in the process that writes the outputs (not in xdist workers: the controller
stops them, as on Ctrl-C), only from the main thread (the only one Python delivers signals to),
and only over the default action: a handler the user installed, or SIG_IGN (nohup ignores
SIGHUP so that the run outlives the terminal), is left as it is. The previous handlers are put
back at unconfigure.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any

import pytest

from pytest_hpml.session import is_controller, run_of

SIGNALS = ("SIGTERM", "SIGHUP")


class Terminated(KeyboardInterrupt):
    """A run stopped by SIGTERM or SIGHUP: pytest ends the session as on Ctrl-C."""

    def __init__(self, signal_name: str) -> None:
        super().__init__(f"{signal_name} received: the run stops as on Ctrl-C")
        self.signal_name = signal_name


class Stopper:
    """The handlers this run installed, the ones they replaced, and the signal received."""

    def __init__(self) -> None:
        self.previous: dict[int, Any] = {}
        self.received: str | None = None

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signal.signal works in the main thread only (pytest.main from a thread)
        for name in SIGNALS:
            number = getattr(signal, name, None)
            if number is None:  # pragma: no cover - Windows has no SIGHUP
                continue
            if signal.getsignal(number) is signal.SIG_DFL:
                self.previous[number] = signal.signal(number, self.handle)

    def handle(self, number: int, frame: FrameType | None) -> None:
        name = signal.Signals(number).name
        self.received = self.received or name
        raise Terminated(name)

    def restore(self) -> None:
        for number, previous in self.previous.items():
            # Only our own: a handler installed over ours since then stays.
            if signal.getsignal(number) == self.handle:
                signal.signal(number, previous)
        self.previous.clear()


STOPPER_KEY = pytest.StashKey[Stopper]()


def pytest_configure(config: pytest.Config) -> None:
    if is_controller(config):
        stopper = config.stash[STOPPER_KEY] = Stopper()
        stopper.install()


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    stopper = session.config.stash.get(STOPPER_KEY, None)
    if stopper is not None and stopper.received:
        run = run_of(session.config)
        run.say_once(f"terminated by {stopper.received}: the run stopped as on Ctrl-C; its "
                     f"outputs hold the {run.ran} test(s) that finished")


def pytest_unconfigure(config: pytest.Config) -> None:
    stopper = config.stash.get(STOPPER_KEY, None)
    if stopper is not None:
        stopper.restore()
