"""Fixtures of the time-to-accuracy lab: its shared state (data and training runs), one per
session and process and size profile (see lab.py for why not a file cache)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .lab import TTALab


@pytest.fixture(scope="session")
def _tta_labs() -> dict[str, TTALab]:
    return {}


@pytest.fixture
def tta_lab(hpml, data_root: Path | None, hpml_download: bool,
            _tta_labs: dict[str, TTALab]) -> TTALab:
    if hpml.profile not in _tta_labs:
        _tta_labs[hpml.profile] = TTALab(hpml.profile, data_root, hpml_download)
    return _tta_labs[hpml.profile]
