"""The lab's TiledMatMul as a Triton kernel: correct at odd shapes, usable by the MLP, and timed
against torch.matmul on a GPU (under the interpreter it is checked, never timed)."""

from __future__ import annotations

import math

import pytest
import torch

from suites.mlp import model
from suites.mlp.tiled_matmul import tiled_matmul
from suites.mlp.training import MLPConfig, train_sequential

pytestmark = pytest.mark.mlp

# Odd shapes that straddle the tiles on every side, a skinny one and a 1 x 1 x 1.
SHAPES = [(33, 47, 29), (1, 1, 1), (17, 5, 40), (40, 64, 3)]


def _tolerance(device: torch.device, k: int) -> tuple[float, float]:
    """tf32 on a GPU keeps 10 mantissa bits per product; the interpreter computes in fp32.
    Rounding errors of a K-term sum of randn products grow like sqrt(K)."""
    eps = 2.0**-10 if device.type == "cuda" else 2.0**-23
    return 4 * eps, 4 * eps * math.sqrt(k)


@pytest.mark.hpml_devices("cpu", "cuda")
@pytest.mark.parametrize(("m", "k", "n"), SHAPES, ids=[f"{m}x{k}x{n}" for m, k, n in SHAPES])
@pytest.mark.parametrize("layout", ["row-major", "transposed"])
def test_tiled_matmul_matches_fp64(hpml, device, m, k, n, layout):
    hpml.experiment = "MLP: Triton tiled matmul vs fp64 reference"
    g = torch.Generator().manual_seed(m * 10_000 + k * 100 + n)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    if layout == "transposed":  # the MLP's backward pass feeds W.T and dZ.T views
        a = torch.randn(k, m, generator=g).T
        b = torch.randn(n, k, generator=g).T
    expected = a.double() @ b.double()
    actual = tiled_matmul(a.to(hpml.device), b.to(hpml.device))
    rtol, atol = _tolerance(hpml.device, k)
    hpml.check_close(actual.cpu().double(), expected, rtol=rtol, atol=atol)


def test_tiled_matmul_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="fp32"):
        tiled_matmul(torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(ValueError, match=r"\(M, K\) @ \(K, N\)"):
        tiled_matmul(torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(ValueError, match="gemm='torch'"):
        train_sequential(torch.ones(2, 4, dtype=torch.float64), torch.zeros(2, dtype=torch.int64),
                         MLPConfig(hidden=2, batch_size=2, gemm="triton"), torch.float64)


def test_empty_sum_gives_zeros():
    """A data-parallel rank with zero rows multiplies (C, 0) @ (0, H)."""
    assert torch.equal(tiled_matmul(torch.ones(3, 0), torch.ones(0, 4)), torch.zeros(3, 4))


@pytest.mark.hpml_devices("cpu", "cuda")
def test_mlp_trains_the_same_with_the_tiled_matmul(hpml, device):
    """The switch: two SGD steps with every GEMM in Triton against torch.matmul (small, so the
    interpreter stays quick)."""
    g = torch.Generator().manual_seed(3)
    X = torch.rand(24, 50, generator=g)
    y = torch.randint(0, model.NUM_CLASSES, (24,), generator=g)
    runs = {gemm: train_sequential(X, y, MLPConfig(hidden=19, batch_size=12, lr=0.5, gemm=gemm),
                                   torch.float32, hpml.device) for gemm in ("torch", "triton")}
    rtol, atol = _tolerance(hpml.device, X.shape[1])
    for name, a, b in zip(model.Params.names(), runs["triton"].params.tensors(),
                          runs["torch"].params.tensors(), strict=True):
        hpml.check_close(a, b, rtol=rtol, atol=atol, name=f"max_rel_error_{name}")


MLP_GEMMS = {  # (M, K, N) of the step's GEMMs at the published size (B = 3000, H = 512)
    "forward_layer0": (3000, 784, 512), "backward_dW0": (512, 3000, 784),
    "forward_layer1": (3000, 512, 10),
}


@pytest.mark.hpml_devices("cuda")
@pytest.mark.hpml_pivot(index=["gemm"], columns="kernel", metrics=["achieved_flops"])
@pytest.mark.parametrize("kernel", ["triton_tiled", "torch.matmul"])
@pytest.mark.parametrize("gemm", list(MLP_GEMMS))
def test_tiled_matmul_speed(hpml, device, gemm, kernel):  # pragma: no cover - GPU only
    hpml.experiment = "MLP: Triton tiled matmul vs torch.matmul (fp32 inputs, tf32 math)"
    m, k, n = MLP_GEMMS[gemm]
    a = torch.randn(m, k, device=hpml.device)
    b = torch.randn(k, n, device=hpml.device)
    fn = tiled_matmul if kernel == "triton_tiled" else torch.matmul
    rtol, atol = _tolerance(hpml.device, k)
    # Triton's tl.dot computes fp32 inputs in tf32 on NVIDIA GPUs; torch.matmul defaults to
    # full fp32. Both in tf32, or the comparison is tensor cores against CUDA cores.
    tf32_before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        hpml.check_close(fn(a, b).double(), a.double() @ b.double(), rtol=rtol, atol=atol)
        timing = hpml.time(fn, a, b)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32_before
    hpml.record_flops("achieved_flops", 2 * m * k * n, timing)
