"""The state of one pytest-hpml run, shared by the plugin's modules through config.stash: the
records gathered from the tests, the rows of tests that did not pass, the outputs written and
the one-line messages of the terminal summary (a pytest plugin module: it creates the state
first). It imports no other module of the plugin."""

from __future__ import annotations

import os

import pytest

from pytest_hpml.results import Record


class HpmlRun:
    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.records: list[Record] = []
        self.failed_ids: set[str] = set()  # rows of failed tests: reported, never saved
        self.messages: list[str] = []  # said once each in the terminal summary
        self.written: list[str] = []  # outputs written at the end, "wrote PATH" lines

    def say_once(self, message: str) -> None:
        if message not in self.messages:
            self.messages.append(message)


RUN_KEY = pytest.StashKey[HpmlRun]()


def run_of(config: pytest.Config) -> HpmlRun:
    return config.stash[RUN_KEY]


def is_controller(config: pytest.Config) -> bool:
    """True unless this is an xdist worker: only the controller writes files."""
    return not hasattr(config, "workerinput")


def xdist_workers(config: pytest.Config) -> int:
    """The number of xdist workers this run starts (0 without -n)."""
    value = getattr(config.option, "numprocesses", None)
    if value in (None, 0):
        return 0
    if isinstance(value, int):
        return value
    return os.cpu_count() or 1  # "auto" and "logical": xdist picks about one per core


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[RUN_KEY] = HpmlRun(config)


#: Where an xdist worker leaves its one-line messages for the controller (workeroutput).
WORKER_MESSAGES = "hpml_messages"


def pytest_sessionfinish(session: pytest.Session) -> None:
    # A worker's messages (a marker option not used, a chart not drawn) reach the terminal
    # through the controller, the only process that prints the summary.
    if not is_controller(session.config):
        session.config.workeroutput[WORKER_MESSAGES] = list(run_of(session.config).messages)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: unknown to a run without xdist
def pytest_testnodedown(node: object, error: object) -> None:
    config = getattr(node, "config", None)  # the controller's (xdist's WorkerController)
    output = getattr(node, "workeroutput", None) or {}
    if config is not None and RUN_KEY in config.stash:
        for message in output.get(WORKER_MESSAGES, []):
            run_of(config).say_once(message)
