"""Measured ceilings: copy bandwidth and matmul FLOP/s, measured once per device and dtype."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from pytest_hpml.measure import ceilings
from pytest_hpml.measure.ceilings import Ceilings, math_mode


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
def test_matmul_ceiling_is_2n3_flops_over_the_matmuls_time(small, dtype: torch.dtype) -> None:
    if dtype == torch.int8:
        try:
            torch._int_mm(torch.ones(16, 16, dtype=torch.int8), torch.ones(16, 16,
                                                                          dtype=torch.int8))
        except RuntimeError as exc:
            pytest.skip(f"torch._int_mm does not run on this CPU build: {exc}")
    c = Ceilings(torch.device("cpu"), "quick", FixedClock())
    assert c.matmul_flops(dtype) == pytest.approx(2 * 16**3 / 2e-3)
    (key,) = c.measured()
    assert key.startswith(f"matmul-{dtype}")



def _backends(fp32: str) -> SimpleNamespace:
    """torch.backends as torch 2.9 has it, fp32 matmuls set to `fp32` ("tf32" or "ieee")."""
    matmul = SimpleNamespace(fp32_precision=fp32, allow_fp16_reduced_precision_reduction=True,
                             allow_bf16_reduced_precision_reduction=True)
    return SimpleNamespace(cuda=SimpleNamespace(matmul=matmul), fp32_precision="none",
                           mkldnn=SimpleNamespace(matmul=SimpleNamespace(fp32_precision=fp32)))


def test_the_fp32_matmul_ceiling_is_measured_per_math_mode(small) -> None:
    # A TF32 ceiling is several times an IEEE one on a GPU: a % of peak in IEEE must not divide
    # by the TF32 figure measured earlier in the process, nor the other way round.
    backends = _backends("tf32")
    clock = FixedClock()
    c = Ceilings(torch.device("cpu"), "quick", clock, backends=backends)
    c.matmul_flops(torch.float32)
    batches = clock.batches
    backends.cuda.matmul.fp32_precision = backends.mkldnn.matmul.fp32_precision = "ieee"
    c.matmul_flops(torch.float32)
    assert clock.batches > batches  # measured again in the new mode
    assert sorted(c.measured()) == ["matmul-torch.float32-ieee", "matmul-torch.float32-tf32"]
    c.matmul_flops(torch.float32)
    assert len(c.measured()) == 2  # and each mode once


def test_math_modes_as_each_device_and_torch_reads_them() -> None:
    assert math_mode("cuda", torch.float32, _backends("tf32")) == "tf32"
    inherit = _backends("none")
    assert math_mode("cuda", torch.float32, inherit) == "ieee"  # torch's default
    inherit.fp32_precision = "tf32"
    assert math_mode("cuda", torch.float32, inherit) == "tf32"
    legacy = SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=True)))
    assert math_mode("cuda", torch.float32, legacy) == "tf32"
    assert math_mode("cuda", torch.bfloat16, _backends("ieee")) == "reduced-precision-reduction"
    assert math_mode("cpu", torch.int8, _backends("ieee")) == ""
