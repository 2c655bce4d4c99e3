"""Repo-level fixtures for the suites: where the data sets live, and seeding."""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest

# --hpml-dataset value -> the name suites.common.data.load takes.
MNIST_FORMAT_SETS = {"mnist": "MNIST", "fashion-mnist": "FashionMNIST"}


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("hpml")
    group.addoption("--hpml-data-root", metavar="DIR", default=None,
                    help="folder holding torchvision's MNIST / Fashion-MNIST / CIFAR-10 (env "
                         "HPML_DATA_ROOT); "
                         "without it the labs use deterministic synthetic stand-ins")
    group.addoption("--hpml-download", action="store_true",
                    help="let torchvision download the data sets into the data root")
    group.addoption("--hpml-dataset", choices=sorted(MNIST_FORMAT_SETS), default="mnist",
                    help="the 28 x 28 grey-level set of the MNIST lab (mlp): mnist (default) or "
                         "fashion-mnist, Fashion-MNIST read from <data root>/FashionMNIST/raw/ "
                         "(same format; its figures are never compared with published MNIST "
                         "ones)")


def pytest_configure(config: pytest.Config) -> None:
    """Fashion-MNIST is asked for by name: without it, stop at once and say how to get it
    (MNIST, the default, falls back to the synthetic stand-in as every data set does)."""
    choice = config.getoption("hpml_dataset", default="mnist")
    if choice == "mnist":
        return
    from suites.common.data import missing_idx_files

    root = config.getoption("hpml_data_root") or os.environ.get("HPML_DATA_ROOT")
    if root is None:
        missing = ["no data root given"]
    elif config.getoption("hpml_download", default=False):
        missing = []  # torchvision fetches what is missing into the root
    else:
        missing = missing_idx_files(MNIST_FORMAT_SETS[choice], Path(root).expanduser())
    if missing:
        raise pytest.UsageError(
            f"--hpml-dataset {choice} needs the real images; missing: "
            f"{', '.join(str(m) for m in missing)}. Put the four IDX files, decompressed, in "
            "<data root>/FashionMNIST/raw/ and pass --hpml-data-root=<data root> (or set "
            "HPML_DATA_ROOT); `apt-get install dataset-fashion-mnist` (Debian, Ubuntu) puts them, "
            "gzipped, in /usr/share/datasets/fashion-mnist/. Or add --hpml-download.")


def pytest_report_header(config: pytest.Config) -> list[str]:
    """With a data root, say once per data set whether the labs will find it there (a set that
    is not there falls back to the synthetic stand-in, which every row also says)."""
    root = config.getoption("hpml_data_root") or os.environ.get("HPML_DATA_ROOT")
    if not root:
        return []
    from suites.common.data import missing_files

    root_path = Path(root).expanduser()
    lines = []
    names = ["MNIST", "CIFAR-10"] + (["FashionMNIST"] if config.getoption(
        "hpml_dataset", default="mnist") == "fashion-mnist" else [])
    for name in names:
        missing = missing_files(name, root_path)
        if missing:
            lines.append(f"hpml: data root {root_path}: {name} not found (torchvision looks for "
                         f"{missing[0]}); its labs use the synthetic stand-in")
        else:
            lines.append(f"hpml: data root {root_path}: {name} found")
    return lines


@pytest.fixture(scope="session")
def data_root(pytestconfig: pytest.Config) -> Path | None:
    root = pytestconfig.getoption("hpml_data_root") or os.environ.get("HPML_DATA_ROOT")
    return Path(root).expanduser() if root else None


@pytest.fixture(scope="session")
def mnist_dataset(pytestconfig: pytest.Config) -> str:
    """Which MNIST-format set the MNIST lab loads: "MNIST" or "FashionMNIST"."""
    return MNIST_FORMAT_SETS[pytestconfig.getoption("hpml_dataset")]


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
