"""The state of one pytest-hpml run, shared by the plugin's modules through config.stash: the
size profile, the records gathered from the tests, the measured ceilings and the one-line
messages of the terminal summary (a pytest plugin module: it creates the state first)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_hpml.results import Record

if TYPE_CHECKING:  # torch is imported only by tests that use it: plain tests stay fast
    from pytest_hpml.fixture import Hpml
    from pytest_hpml.measure.ceilings import Ceilings


class HpmlRun:
    def __init__(self, config: pytest.Config, profile: str) -> None:
        self.config = config
        self.profile = profile
        self.records: list[Record] = []
        self.failed_ids: set[str] = set()  # rows of failed tests: reported, never saved
        self.messages: list[str] = []  # said once each in the terminal summary
        self.written: list[str] = []  # outputs written at the end, "wrote PATH" lines
        self._ceilings: dict[str, Ceilings] = {}

    def ceilings_for(self, device: Any) -> Ceilings:
        """The device's measured ceilings, one set per device per process, with a clock of
        their own (never a test's clock, nor its cold-L2 setting)."""
        from pytest_hpml.measure.ceilings import Ceilings

        key = str(device)
        if key not in self._ceilings:
            self._ceilings[key] = Ceilings(device, self.profile)
        return self._ceilings[key]

    def say_once(self, message: str) -> None:
        if message not in self.messages:
            self.messages.append(message)


RUN_KEY = pytest.StashKey[HpmlRun]()
FIXTURE_KEY = pytest.StashKey["Hpml"]()


def run_of(config: pytest.Config) -> HpmlRun:
    return config.stash[RUN_KEY]


def fixture_of(item: pytest.Item) -> Hpml | None:
    """The hpml fixture a test used, if it used one."""
    return item.stash.get(FIXTURE_KEY, None)


def is_controller(config: pytest.Config) -> bool:
    """True unless this is an xdist worker: only the controller writes files."""
    return not hasattr(config, "workerinput")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    from pytest_hpml.selection import profile_for

    config.stash[RUN_KEY] = HpmlRun(config, profile_for(config))
