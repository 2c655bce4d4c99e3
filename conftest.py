"""Repo-level fixtures for the suites: where the data sets live, and seeding."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hpml")
    group.addoption("--hpml-data-root", metavar="DIR", default=None,
                    help="folder holding torchvision's MNIST / CIFAR-10 (env HPML_DATA_ROOT); "
                         "without it the labs use deterministic synthetic stand-ins")
    group.addoption("--hpml-download", action="store_true",
                    help="let torchvision download the data sets into the data root")


@pytest.fixture(scope="session")
def data_root(pytestconfig: pytest.Config) -> Path | None:
    root = pytestconfig.getoption("hpml_data_root") or os.environ.get("HPML_DATA_ROOT")
    return Path(root).expanduser() if root else None


@pytest.fixture(scope="session")
def hpml_download(pytestconfig: pytest.Config) -> bool:
    return bool(pytestconfig.getoption("hpml_download"))


@pytest.fixture(autouse=True)
def _seeded() -> None:
    """Every test starts from the same random state, whatever ran before it in the worker."""
    import numpy as np
    import torch

    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
