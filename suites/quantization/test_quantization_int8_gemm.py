"""The Triton int8 GEMM, bit for bit against torch's integer reference of the same contract:
odd shapes (M, N, K not multiples of any block size), strided B (a weight's transpose), and
every epilogue: int32 (+ bias), float scales (+ bias), fixed-point requantize to int8.

On CPU this runs in Triton's interpreter; on a GPU the same test runs the compiled, autotuned
kernel (the cuda case, marked gpu)."""
from __future__ import annotations

import pytest
import torch

from suites.quantization.fixed_point import FixedPointMultiplier
from suites.quantization.int8_gemm import int8_gemm, int8_gemm_reference, interpreting

pytestmark = [pytest.mark.quantization, pytest.mark.int8]

# (M, N, K): scalars, odd sizes, and the CNN's own layers (im2col conv1/conv2, fc1..fc3).
SHAPES = [(1, 1, 1), (33, 45, 70), (17, 6, 75), (100, 16, 150), (7, 120, 400), (5, 10, 84),
          (130, 84, 120), (64, 64, 129)]


def _operands(m: int, n: int, k: int, device: torch.device, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), generator=g, dtype=torch.int8)
    weight = torch.randint(-128, 128, (n, k), generator=g, dtype=torch.int8)
    return a.to(device), weight.to(device).t()  # B = W^T: K-major, as the model uses it


def _device(hpml) -> torch.device:
    """The test's torch.device (the `device` parameter itself is its name)."""
    device = hpml.device
    if device.type == "cpu" and not interpreting():
        pytest.skip("a CUDA device is present, so Triton is not interpreted: the cuda case runs "
                    "the kernel")
    return device


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_int32_accumulation_is_exact(hpml, device, shape):
    device = _device(hpml)
    hpml.experiment = "int8 GEMM: correctness"
    hpml.param(epilogue="int32 + bias")
    m, n, k = shape
    a, b = _operands(m, n, k, device)
    bias = torch.randint(-2 ** 20, 2 ** 20, (n,), dtype=torch.int32).to(device)
    out = int8_gemm(a, b, bias=bias)
    assert out.dtype == torch.int32
    # Ground truth in int64 on CPU, independent of the float64 path of the reference.
    truth = (a.cpu().long() @ b.cpu().long() + bias.cpu().long()).to(torch.int32)
    hpml.check_close(out.cpu(), truth, rtol=0, atol=0)
    hpml.check_close(int8_gemm_reference(a, b, bias=bias).cpu(), truth, rtol=0, atol=0,
                     name="reference_max_rel_error")


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_requantize_epilogue_is_bit_exact(hpml, device, shape):
    device = _device(hpml)
    hpml.experiment = "int8 GEMM: correctness"
    hpml.param(epilogue="int32 bias + fixed-point requantize")
    m, n, k = shape
    a, b = _operands(m, n, k, device, seed=1)
    g = torch.Generator().manual_seed(2)
    bias = torch.randint(-5000, 5000, (n,), generator=g, dtype=torch.int32).to(device)
    # The accumulator's std is about 128 * 74 * sqrt(K); per-channel factors from 1/10 to 10x
    # the one mapping it to 100 make the outputs hit both rails and the middle.
    typical = 100 / (128 * 74 * k ** 0.5)
    multiplier = FixedPointMultiplier.from_real(
        typical * 10 ** (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1))
    for zero_point, qmin in ((0, 0), (-5, -128)):  # ReLU folded / plain asymmetric output
        out = int8_gemm(a, b, bias=bias, multiplier=multiplier, zero_point=zero_point,
                        qmin=qmin, qmax=127)
        expected = int8_gemm_reference(a, b, bias=bias, multiplier=multiplier,
                                       zero_point=zero_point, qmin=qmin, qmax=127)
        assert out.dtype == torch.int8
        hpml.check_close(out.cpu().int(), expected.cpu().int(), rtol=0, atol=0)
    if m * n >= 100:  # enough outputs that a random problem reaches both rails and the middle
        values = out.cpu()
        assert (values == 127).any() and (values == -128).any() and (values.abs() < 100).any()


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_float_epilogue_applies_row_and_column_scales(hpml, device, shape):
    device = _device(hpml)
    hpml.experiment = "int8 GEMM: correctness"
    hpml.param(epilogue="row/col scales + float bias")
    m, n, k = shape
    a, b = _operands(m, n, k, device, seed=3)
    g = torch.Generator().manual_seed(4)
    row = (torch.rand(m, generator=g) * 0.02 + 1e-3).to(device)
    col = (torch.rand(n, generator=g) * 0.02 + 1e-3).to(device)
    bias = torch.randn(n, generator=g).to(device)
    out = int8_gemm(a, b, row_scale=row, col_scale=col, bias=bias)
    expected = int8_gemm_reference(a, b, row_scale=row, col_scale=col, bias=bias)
    # Same float32 operation order: exact in the interpreter; a GPU may contract to an FMA.
    tol = 0 if device.type == "cpu" else 1e-6
    hpml.check_close(out.cpu(), expected.cpu(), rtol=tol, atol=tol)
    only_col = int8_gemm(a, b, col_scale=col)
    hpml.check_close(only_col.cpu(), int8_gemm_reference(a, b, col_scale=col).cpu(), rtol=tol,
                     atol=tol, name="col_only_max_rel_error")


def test_extreme_operands_do_not_overflow(hpml, device):
    device = _device(hpml)
    hpml.experiment = "int8 GEMM: correctness"
    hpml.param(epilogue="int32, all -128")
    k = 1000  # 128 * 128 * 1000 = 16.4 million: far inside int32
    a = torch.full((20, k), -128, dtype=torch.int8, device=device)
    b = torch.full((k, 18), -128, dtype=torch.int8, device=device)
    out = int8_gemm(a, b)
    assert (out.cpu() == 128 * 128 * k).all()


def test_bad_operands_are_clear_errors():
    a = torch.zeros(4, 8, dtype=torch.int8)
    with pytest.raises(TypeError, match="int8 operands"):
        int8_gemm(a.float(), torch.zeros(8, 4, dtype=torch.int8))
    with pytest.raises(ValueError, match=r"A \(M, K\) and B \(K, N\)"):
        int8_gemm(a, torch.zeros(7, 4, dtype=torch.int8))
    with pytest.raises(ValueError, match="either float scales or a requantize"):
        int8_gemm(a, torch.zeros(8, 4, dtype=torch.int8), col_scale=torch.ones(4),
                  multiplier=FixedPointMultiplier.from_real(0.1, channels=4))
    with pytest.raises(TypeError, match="bias must be int32"):
        int8_gemm(a, torch.zeros(8, 4, dtype=torch.int8), bias=torch.zeros(4))
