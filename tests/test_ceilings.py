"""Measured ceilings: copy bandwidth and matmul FLOP/s, measured once per device and dtype."""

from __future__ import annotations

import pytest
import torch

from pytest_hpml.measure import ceilings
from pytest_hpml.measure.ceilings import Ceilings


class FixedClock:
    """Every call takes 2 ms; counts the batches it was asked to run."""

    device = "cpu"

    def __init__(self) -> None:
        self.batches = 0

    def run(self, fn, count: int, inner: int, **_) -> list[float]:
        self.batches += 1
        for _ in range(count * inner):
            fn()
        return [2e-3] * count


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(ceilings.COPY_BYTES, "quick", 4 * 1024)
    monkeypatch.setitem(ceilings.MATMUL_N, "quick", {"cpu": 16, "cuda": 16})


def test_copy_bandwidth_counts_read_and_write(small) -> None:
    clock = FixedClock()
    c = Ceilings(torch.device("cpu"), "quick", clock)
    assert c.copy_bandwidth() == pytest.approx(2 * 4096 / 2e-3)
    batches = clock.batches
    assert c.copy_bandwidth() == pytest.approx(2 * 4096 / 2e-3)
    assert clock.batches == batches  # measured once, then cached


@pytest.mark.parametrize("dtype", [torch.float32, torch.int8])
def test_matmul_flops(small, dtype: torch.dtype) -> None:
    if dtype == torch.int8:
        try:
            torch._int_mm(torch.ones(16, 16, dtype=torch.int8), torch.ones(16, 16,
                                                                          dtype=torch.int8))
        except RuntimeError as exc:
            pytest.skip(f"torch._int_mm does not run on this CPU build: {exc}")
    c = Ceilings(torch.device("cpu"), "quick", FixedClock())
    assert c.matmul_flops(dtype) == pytest.approx(2 * 16**3 / 2e-3)
    assert c.measured() == {f"matmul-{dtype}": pytest.approx(2 * 16**3 / 2e-3)}

