"""The plugin's own hooks: how its modules hand work to each other in a run, declared instead
of resting on the order in which pytest happens to call their wrappers (pytest-xdist declares
its hooks the same way).

    recording   makes each test's records and calls pytest_hpml_judge before it puts them on
                the test's report; stored_baseline and base_ref judge them (verdicts, a
                failing comparison)
    reporting   at the end calls pytest_hpml_finish (stored_baseline judges what no test
                made),
                then asks pytest_hpml_outputs for the files to write; it writes its report and
                exports, stored_baseline the baseline, each on its own
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from pytest_hpml.report.files import Output
    from pytest_hpml.results import Record


@pytest.hookspec
def pytest_hpml_judge(item: pytest.Item, report: pytest.TestReport,
                      records: list[Record]) -> None:
    """Judge the records a test made, once its call report is made and before the records are
    put on it: fill each measured metric's verdict, and fail the report where the comparison
    fails. Controller and xdist workers alike."""


@pytest.hookspec
def pytest_hpml_finish(session: pytest.Session) -> None:
    """The run's tests are done (controller only): judgements across tests (rows of the
    baseline that no test made) are made here, before any output is written."""


@pytest.hookspec
def pytest_hpml_outputs(config: pytest.Config) -> list[Output]:
    """The files this plugin module writes at the end of the run (controller only), each
    written on its own: one that fails does not keep the others from being written."""
