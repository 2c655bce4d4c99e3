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
        # Rows of tests that did not pass (failed, xfail, an error in teardown): reported, never
        # saved.
        self.failed_ids: set[str] = set()
        self.ran = 0  # tests whose call phase ran (in this process or an xdist worker)
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


#: Options of the outer run alone, by argparse dest: its outputs, the comparison and the save,
#: and the size profile (a rerun is given the one the outer run chose). A confirmation rerun
#: (pytest_hpml.compare.confirm) gets the invocation's own arguments without these. Each module
#: that declares such an option says so here beside its declaration (outer_run_only), so a
#: new output option cannot leak into reruns unnoticed.
OUTER_RUN_ONLY: set[str] = set()


def outer_run_only(*flags: str) -> None:
    """Mark options (by flag, "--hpml-report") as not given to confirmation reruns."""
    OUTER_RUN_ONLY.update(flag.lstrip("-").replace("-", "_") for flag in flags)


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[RUN_KEY] = HpmlRun(config)
