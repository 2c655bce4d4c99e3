"""Fixtures of the data-parallel lab: the lab at the test's profile and device type (its runs
kept for the process), and rank processes that start with the lab already imported."""

from __future__ import annotations

import multiprocessing.forkserver
from pathlib import Path

import pytest

from suites.data_parallel.lab import Lab

#: What every rank of this lab imports. The launcher's forkserver preloads torch only, so each
#: rank of each run would import torchvision again (over a second per rank on a busy 2-core
#: machine, dozens of ranks per session).
RANK_MODULES = ["torch", "torch.distributed", "torchvision", "suites.data_parallel.ranks"]


@pytest.fixture(scope="session", autouse=True)
def _ranks_start_with_the_lab_imported() -> None:
    """Start this process's forkserver (the one the launcher forks its ranks from) with the
    lab's modules preloaded. A server already started by an earlier test keeps its own
    preloads: the ranks are then only slower to start, never different."""
    multiprocessing.forkserver.set_forkserver_preload(RANK_MODULES)
    multiprocessing.forkserver.ensure_running()


@pytest.fixture(scope="session")
def _labs() -> dict[tuple, Lab]:
    return {}


@pytest.fixture
def lab(hpml, device: str, data_root: Path | None, _labs: dict[tuple, Lab]) -> Lab:
    key = (hpml.profile, device, data_root)
    if key not in _labs:
        _labs[key] = Lab(hpml.profile, device, data_root)
    return _labs[key]
