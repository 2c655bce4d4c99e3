"""What runs: the device parametrization, sweeps per size profile, precision params."""

from __future__ import annotations

from typing import Any

import pytest

PROFILES = ("quick", "full")
PRECISIONS = ("fp64", "fp32", "fp16", "bf16", "int8")


def precisions(*names: str) -> list[Any]:
    """pytest.param(torch.<dtype>, marks=<precision marker>, id=name) for each name."""
    import torch

    dtypes = {"fp64": torch.float64, "fp32": torch.float32, "fp16": torch.float16,
              "bf16": torch.bfloat16, "int8": torch.int8}
    unknown = [n for n in names if n not in dtypes]
    if unknown:
        raise ValueError(f"unknown precision(s) {unknown}; choose from {list(dtypes)}")
    return [pytest.param(dtypes[n], marks=getattr(pytest.mark, n), id=n) for n in names]


def device_params(metafunc: pytest.Metafunc) -> list[Any]:
    """A `cpu` case and a `cuda` case marked gpu (hpml_devices(...) narrows the list)."""
    marker = metafunc.definition.get_closest_marker("hpml_devices")
    names = list(marker.args) if marker else ["cpu", "cuda"]
    bad = [n for n in names if n not in ("cpu", "cuda")]
    if bad or not names:
        raise pytest.UsageError(
            f"{metafunc.definition.nodeid}: hpml_devices takes 'cpu' and/or 'cuda', got {names}"
        )
    return [pytest.param(n, marks=[pytest.mark.gpu] if n == "cuda" else [], id=n) for n in names]


def sweep_values(metafunc: pytest.Metafunc, profile: str) -> list[tuple[str, list[Any]]]:
    """(argname, values) for each @pytest.mark.hpml_sweep(argname, quick=[...], full=[...])."""
    sweeps = []
    for marker in metafunc.definition.iter_markers("hpml_sweep"):
        where = metafunc.definition.nodeid
        if len(marker.args) != 1 or not isinstance(marker.args[0], str):
            raise pytest.UsageError(f"{where}: hpml_sweep takes one argument name, "
                                    "e.g. hpml_sweep('k_million', quick=[...], full=[...])")
        missing = [p for p in PROFILES if p not in marker.kwargs]
        if missing:
            raise pytest.UsageError(f"{where}: hpml_sweep({marker.args[0]!r}) needs a list for "
                                    f"each profile; missing: {missing}")
        values = list(marker.kwargs[profile])
        if not values:
            raise pytest.UsageError(f"{where}: hpml_sweep({marker.args[0]!r}) has no values "
                                    f"for profile {profile!r}")
        sweeps.append((marker.args[0], values))
    return sweeps
