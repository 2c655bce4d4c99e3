"""Fixtures of the data-parallel lab: the lab at the test's profile and device type (its runs
kept for the process), and rank processes that start with the lab already imported."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_hpml.distributed import preload_for_ranks
from suites.data_parallel.lab import Lab

#: What every rank of this lab imports beside torch. Without it in the forkserver's list, each
#: rank of each run would import torchvision again (over a second per rank on a busy 2-core
#: machine, dozens of ranks per session).
RANK_MODULES = ["torchvision", "suites.data_parallel.ranks"]


@pytest.fixture(scope="session", autouse=True)
def _ranks_start_with_the_lab_imported() -> None:
    """The ranks of this lab start with its modules imported (a server already started by an
    earlier test keeps its own imports: the ranks are then only slower to start)."""
    preload_for_ranks(RANK_MODULES)


@pytest.fixture(scope="session")
def _labs() -> dict[tuple, Lab]:
    return {}


@pytest.fixture
def lab(hpml, device: str, data_root: Path | None, _labs: dict[tuple, Lab]) -> Lab:
    key = (hpml.profile, device, data_root)
    if key not in _labs:
        _labs[key] = Lab(hpml.profile, device, data_root)
    return _labs[key]
