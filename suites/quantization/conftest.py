"""Fixtures of the quantization lab.

The trained fp32 reference is cached per pytest session (one dict per process, keyed by size
profile), not in a file cache: quick training takes seconds, so an xdist worker retraining its
own copy costs less than a file cache would need to get right (invalidating it on any change to
the model, training loop, data or seed). Training is seeded, so every worker holds the same
model on the same device type. Tests take the `device` parameter: the lab of a cuda case is
trained on the GPU."""
from __future__ import annotations

from pathlib import Path

import pytest

from suites.quantization.lab import QuantizationLab, build_lab


@pytest.fixture(scope="session")
def _quantization_labs() -> dict[tuple[str, str], QuantizationLab]:
    return {}


@pytest.fixture
def lab(hpml, data_root: Path | None, hpml_download: bool,
        _quantization_labs: dict[tuple[str, str], QuantizationLab]) -> QuantizationLab:
    """The lab at this test's size profile, trained on the test's device once per session."""
    key = (hpml.profile, hpml.device.type)
    if key not in _quantization_labs:
        _quantization_labs[key] = build_lab(hpml.profile, data_root, hpml_download, hpml.device)
    return _quantization_labs[key]
