"""GPU benchmark: the Triton int8 GEMM against torch.matmul in bf16 / fp16 and torch._int_mm,
at square sizes and at the CNN's own layer shapes (batch 1024, convolutions as im2col GEMMs).
Throughput in TOPS (recorded as OP/s) and as % of the device's measured int8 peak
(hpml.ceilings: torch._int_mm at its largest size). Target on H100-class GPUs: >= 1.5x the bf16
throughput at 4096^3 (recorded, not asserted). Needs CUDA: skipped elsewhere, except the check
that the timed calls do nothing but the product, which runs on the CPU."""
from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from suites.quantization import int8_gemm as int8_gemm_module
from suites.quantization.fixed_point import FixedPointMultiplier
from suites.quantization.int8_gemm import int8_gemm, int8_gemm_reference, interpreting, pad_k

# The GPU tests take the `device` parameter narrowed to cuda: the plugin marks that case gpu.
pytestmark = [pytest.mark.quantization, pytest.mark.int8]

BATCH = 1024
# (layer, M, N, K) of CifarCNN at BATCH images: conv1/conv2 as im2col, fc1..fc3.
LAYER_SHAPES = [("conv1", BATCH * 28 * 28, 6, 75), ("conv2", BATCH * 10 * 10, 16, 150),
                ("fc1", BATCH, 120, 400), ("fc2", BATCH, 84, 120), ("fc3", BATCH, 10, 84)]


@dataclass
class Product:
    """A timed call and what its result must be. The expected product is taken in float64
    from the very operands the call multiplies (exact for int8: every partial sum is an integer
    below 2^53), made only after the timing. An integer result must match it bit for bit;
    a bf16 / fp16 result within `max_error` of it, relative to its largest element (the
    output's rounding, and cuBLAS's reduced-precision split-K sums, but no wrong product)."""

    call: Callable[[], torch.Tensor]
    expected: Callable[[], torch.Tensor]
    max_error: float | None = None  # None: bit-exact (rtol = atol = tolerance, 0 by default)
    tolerance: float = 0.0


#: Relative to the largest element: a few roundings at the output's precision (bf16 keeps 8
#: bits, fp16 11), far below the O(1) error of a wrong layout or a missing K block.
MAX_ERROR = {"bf16": 2e-2, "fp16": 5e-3}


def product_error(product: Product, result: torch.Tensor) -> float:
    """How far `result` is from the product: for an integer product the largest relative
    element error, for bf16 / fp16 max |C - C_fp64| / max |C_fp64|."""
    expected = product.expected()
    if product.max_error is None:
        diff = (result.double() - expected).abs()
        return (diff / expected.abs().clamp(min=1)).max().item()
    return ((result.double() - expected).abs().max() / expected.abs().max()).item()


def check_product(row, product: Product, result: torch.Tensor) -> None:
    """The timed calls' own result (the last one, Timing.result) against the product."""
    if product.max_error is None:
        row.check_close(result, product.expected(), rtol=product.tolerance,
                        atol=product.tolerance)
        return
    row.check("max_error_vs_fp64", product_error(product, result), at_most=product.max_error,
              note="max_error_vs_fp64: max |C - C_fp64| / max |C_fp64|, C_fp64 the float64 "
                   "product of the same rounded operands")


def _candidates(m: int, n: int, k: int, device: torch.device) -> dict[str, Product]:
    """Implementations of C = A @ B^T at this shape, B stored (N, K) like a weight.

    Every operand is made here, in its final dtype and layout (the transposes too, though they
    are views): a timed call does the product and allocates its output, nothing else."""
    g = torch.Generator(device=device).manual_seed(0)
    a8 = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device, generator=g)
    b8 = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device, generator=g).t()
    a32 = torch.randn(m, k, device=device, generator=g)
    b32 = torch.randn(n, k, device=device, generator=g).t()
    abf, bbf, ahf, bhf = a32.bfloat16(), b32.bfloat16(), a32.half(), b32.half()
    # K zero-padded to a multiple of 16 once, here, as the integer model pads its weights once:
    # the Triton kernel's loads are 16 bytes wide only then (int8_gemm.K_ALIGNMENT).
    a8_k16, b8_k16 = pad_k(a8, b8)
    exact = functools.cache(lambda: a8.double() @ b8.double())
    products = {
        "triton int8 -> int32": Product(lambda: int8_gemm(a8_k16, b8_k16), exact),
        "torch.matmul bf16": Product(lambda: torch.matmul(abf, bbf),
                                     lambda: abf.double() @ bbf.double(), MAX_ERROR["bf16"]),
        "torch.matmul fp16": Product(lambda: torch.matmul(ahf, bhf),
                                     lambda: ahf.double() @ bhf.double(), MAX_ERROR["fp16"]),
    }
    # torch._int_mm needs M > 16 and K, N multiples of 8 (cuBLASLt int8 constraints).
    if m > 16 and k % 8 == 0 and n % 8 == 0:
        products["torch._int_mm"] = Product(lambda: torch._int_mm(a8, b8), exact)
    return products


def _run(hpml, m: int, n: int, k: int) -> dict[str, float]:
    peak = hpml.ceilings.matmul_flops(torch.int8)
    throughput = {}
    for impl, product in _candidates(m, n, k, hpml.device).items():
        with hpml.row(impl=impl) as row:
            timing = row.time(product.call)
            metric = row.record_flops("throughput", 2 * m * n * k, timing)
            # Judged as the product's time is: the peak is measured once, apart.
            row.record("percent_of_int8_peak", 100 * metric.value / peak, unit="%",
                       better="higher", timing=timing)
            throughput[impl] = metric.value
            check_product(row, product, timing.result)
    hpml.record("int8_peak", peak, unit="FLOP/s", note="measured: torch._int_mm, square")
    hpml.record("triton_int8_vs_bf16", throughput["triton int8 -> int32"]
                / throughput["torch.matmul bf16"], unit="x", better="higher",
                note="target on H100-class GPUs: >= 1.5x at 4096^3")
    return throughput


@pytest.mark.hpml_devices("cuda")
@pytest.mark.hpml_sweep("size", quick=[1024, 2048], full=[1024, 2048, 4096, 8192])
def test_int8_gemm_throughput_square(hpml, device, size):
    hpml.experiment = "int8 GEMM throughput: square"
    _run(hpml, size, size, size)


@pytest.mark.hpml_devices("cuda")
@pytest.mark.parametrize("layer", LAYER_SHAPES, ids=[s[0] for s in LAYER_SHAPES])
def test_int8_gemm_throughput_at_model_layers(hpml, device, layer):
    hpml.experiment = "int8 GEMM throughput: CifarCNN layers"
    name, m, n, k = layer
    hpml.param(M=m, N=n, K=k)
    _run(hpml, m, n, k)


def _epilogues(m: int, n: int, k: int, device: torch.device) -> dict[str, Product]:
    """The Triton GEMM with each fused epilogue at this shape, checked against torch's
    integer reference of the same contract (int8_gemm_reference)."""
    g = torch.Generator(device=device).manual_seed(0)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, device=device, generator=g)
    b = torch.randint(-128, 128, (n, k), dtype=torch.int8, device=device, generator=g).t()
    a, b = pad_k(a, b)  # K a multiple of 16, once (see _candidates)
    # Every operand on the device, in its final dtype, once, here: a conversion or a
    # host-to-device copy inside the timed call would be timed with the GEMM (and a copy syncs).
    bias = torch.zeros(n, dtype=torch.int32, device=device)
    float_bias = bias.float()
    fpm = FixedPointMultiplier.from_real(1e-4, channels=n).to(device)
    row_scales = torch.full((m,), 1e-3, device=device)
    col_scales = torch.full((n,), 1e-3, device=device)
    scaled = dict(row_scale=row_scales, col_scale=col_scales, bias=float_bias)
    # Float scales: the same operation order as the reference; a GPU may contract to an FMA.
    float_tolerance = 0.0 if device.type == "cpu" else 1e-6
    return {
        "int32": Product(lambda: int8_gemm(a, b), lambda: int8_gemm_reference(a, b)),
        "float scales + bias": Product(lambda: int8_gemm(a, b, **scaled),
                                       lambda: int8_gemm_reference(a, b, **scaled),
                                       tolerance=float_tolerance),
        "requantize int8": Product(lambda: int8_gemm(a, b, bias=bias, multiplier=fpm),
                                   lambda: int8_gemm_reference(a, b, bias=bias,
                                                               multiplier=fpm)),
    }


@pytest.mark.hpml_devices("cuda")
def test_fused_requantize_epilogue_cost(hpml, device):
    """The requantize epilogue (int32 bias, fixed-point rescale, clamp) against plain int32
    output at 4096^3: the fused epilogue should cost little next to the K loop."""
    hpml.experiment = "int8 GEMM throughput: epilogues"
    m = n = k = 4096
    for epilogue, product in _epilogues(m, n, k, hpml.device).items():
        with hpml.row(epilogue=epilogue) as row:
            timing = row.time(product.call)
            row.record_flops("throughput", 2 * m * n * k, timing)
            check_product(row, product, timing.result)


class _Dispatched(TorchDispatchMode):
    """The aten ops a block runs, in order."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


#: What a timed call may run: its product and the allocation of its output. A conversion
#: (aten._to_copy), a copy or even a view (aten.t) is host work timed as if it were the GEMM's.
PRODUCT_OPS = {"aten.mm.default", "aten._int_mm.default", "aten.empty.memory_format"}


def test_timed_calls_do_only_the_product(monkeypatch):
    # On the CPU, with the Triton launch stubbed out: a GPU launch runs no aten op, and
    # interpreting it here would add the interpreter's own copies.
    monkeypatch.setattr(int8_gemm_module, "_launch", lambda *args, **kwargs: None)
    monkeypatch.setattr(int8_gemm_module, "interpreting", lambda: True)
    cpu = torch.device("cpu")
    calls = {**_candidates(32, 24, 40, cpu), **_epilogues(32, 24, 40, cpu)}
    assert len(calls) == 7
    for name, product in calls.items():
        with _Dispatched() as dispatched:
            product.call()
        extra = [op for op in dispatched.ops if op not in PRODUCT_OPS]
        assert not extra, f"the timed call {name!r} also runs {extra}"
        assert dispatched.ops.count("aten.empty.memory_format") <= 1, (name, dispatched.ops)


def test_every_timed_product_is_checked_and_a_wrong_one_fails():
    # On the CPU, at a small odd shape (Triton interpreted): each call's result passes its
    # check, and the same result with its rows rotated (a wrong layout) fails it.
    if not interpreting():
        pytest.skip("runs the Triton GEMM on CPU tensors in Triton's interpreter")
    cpu = torch.device("cpu")
    for name, product in {**_candidates(32, 24, 40, cpu), **_epilogues(32, 24, 40, cpu)}.items():
        result = product.call()
        bound = product.max_error if product.max_error is not None else product.tolerance
        assert product_error(product, result) <= bound, name
        assert product_error(product, result.roll(1, dims=0)) > max(bound, 1e-3), name
