"""The lab's TiledMatMul as a Triton kernel: correct at odd shapes and in every tile
configuration the GPU autotunes over, usable by the MLP, and timed against torch.matmul on a GPU
(under the interpreter it is checked, never timed)."""

from __future__ import annotations

import math

import pytest
import torch
import triton

from suites.common.launches import captured_launches
from suites.common.precision import fp32_math
from suites.mlp import model
from suites.mlp import tiled_matmul as tiled
from suites.mlp.tiled_matmul import GPU_CONFIGS, tiled_matmul
from suites.mlp.training import MLPConfig, train_sequential

pytestmark = pytest.mark.mlp

# Odd shapes that straddle the tiles on every side, a skinny one and a 1 x 1 x 1.
SHAPES = [(33, 47, 29), (1, 1, 1), (17, 5, 40), (40, 64, 3)]


def _tolerance(device: torch.device, k: int) -> tuple[float, float]:
    """tf32 on a GPU keeps 10 mantissa bits per product; the interpreter computes in fp32.
    Rounding errors of a K-term sum of randn products grow like sqrt(K)."""
    eps = 2.0**-10 if device.type == "cuda" else 2.0**-23
    return 4 * eps, 4 * eps * math.sqrt(k)


def _needs_triton_on(device: torch.device) -> None:
    if device.type == "cpu" and not tiled.INTERPRETED:
        pytest.skip("Triton runs kernels on CPU tensors only in its interpreter "
                    "(TRITON_INTERPRET=1, set by the plugin on a machine without a GPU)")


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
    _needs_triton_on(hpml.device)
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


# An odd shape for every tile configuration: M below every BLOCK_M, N and K not multiples of any
# tile, so the row mask, the ragged N tiles and the ragged last K step are all exercised.
ODD_SHAPE = (29, 45, 141)  # (M, K, N)


def _tile(config: triton.Config) -> str:
    k = config.kwargs
    return f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}"


GPU_TILES = {_tile(config): config for config in GPU_CONFIGS}


@pytest.mark.parametrize("layout", ["row-major", "transposed"])
@pytest.mark.parametrize("tile", list(GPU_TILES))
def test_every_gpu_tile_config_is_correct_in_the_interpreter(hpml, tile, layout):
    """Each configuration the GPU autotunes over, run once in the interpreter: a mask wrong only
    for big tiles shows here, before any GPU runs it."""
    if not tiled.INTERPRETED:
        pytest.skip("runs the GPU tile configurations in Triton's interpreter "
                    "(TRITON_INTERPRET=1); on a GPU the other tests run them through autotuning")
    hpml.experiment = "MLP: Triton tiled matmul, each GPU tile configuration, interpreted"
    m, k, n = ODD_SHAPE
    g = torch.Generator().manual_seed(11)
    a, b = torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)
    if layout == "transposed":
        a, b = a.T.contiguous().T, b.T.contiguous().T  # same values, column-major strides
    rtol, atol = _tolerance(torch.device("cpu"), k)
    hpml.check_close(tiled_matmul(a, b, config=GPU_TILES[tile]).double(), a.double() @ b.double(),
                     rtol=rtol, atol=atol)


def test_a_transposed_call_is_tuned_on_its_own():
    """The autotune key holds the strides: at one (M, N, K) a row-major and a transposed call are
    two tuning entries, not one (a shared entry gave the backward pass's W.T and dZ.T views
    the tile tuned for row-major operands). Benchmarking is stubbed: the interpreter has no
    GPU timer, and only the key is under test."""
    if not tiled.INTERPRETED:
        pytest.skip("checks the key with CPU tensors in Triton's interpreter (TRITON_INTERPRET=1)")
    assert tiled.tiled_matmul_autotuned.keys == tiled.AUTOTUNE_KEY
    tuned: list[str] = []

    def fake_bench(kernel_call, quantiles):
        kernel_call()
        tuned.append("timed")
        return [1.0, 1.0, 1.0]

    two_configs = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16}),
                   triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16})]
    kernel = triton.autotune(configs=two_configs, key=tiled.AUTOTUNE_KEY,
                             do_bench=fake_bench)(tiled.tiled_matmul_kernel)
    m, k, n = 20, 30, 25
    a, b = torch.randn(m, k), torch.randn(k, n)
    for a_layout in (a, a.T.contiguous().T):
        c = torch.empty(m, n)
        kernel[lambda meta: (triton.cdiv(m, meta["BLOCK_M"]), triton.cdiv(n, meta["BLOCK_N"]))](
            a_layout, b, c, m, n, k, a_layout.stride(0), a_layout.stride(1), b.stride(0),
            b.stride(1), c.stride(0), c.stride(1), INPUT_PRECISION="ieee")
        torch.testing.assert_close(c, a @ b, rtol=1e-5, atol=1e-5)
    assert len(kernel.cache) == 2, f"one tuning entry for both layouts: {list(kernel.cache)}"
    assert len(tuned) == 2 * len(two_configs)


@pytest.mark.parametrize("asked", ["tf32", "ieee"])
def test_the_kernel_computes_in_the_precision_torch_matmul_would(monkeypatch, asked):
    """tl.dot gets the precision of the fp32 switch torch.matmul reads (it used to get none, and
    Triton's default, tf32, whatever was asked); an explicit precision wins. Launches are
    captured on meta tensors, so this needs neither a GPU nor the interpreter."""
    a, b = torch.empty(64, 32, device="meta"), torch.empty(32, 48, device="meta")
    with captured_launches(monkeypatch, tiled, "tiled_matmul_autotuned") as launches:
        with fp32_math(matmul=asked):
            tiled_matmul(a, b)
        tiled_matmul(a, b, precision="ieee")
    assert [launch.kwargs["INPUT_PRECISION"] for launch in launches] == [asked, "ieee"]
    with pytest.raises(ValueError, match="'tf32' or 'ieee'"):
        tiled_matmul(a, b, precision="tf32x3")


def test_the_autotuner_chooses_among_the_tiles_of_the_arithmetic_asked():
    assert tiled.tiled_matmul_autotuned.early_config_prune is tiled.configs_for_precision
    for arithmetic, tiles in tiled.CONFIGS_BY_PRECISION.items():
        chosen = tiled.configs_for_precision(GPU_CONFIGS, {}, INPUT_PRECISION=arithmetic)
        assert [id(c) for c in chosen] == [id(c) for c in tiles]
    # The interpreter's single config is in neither list: it stays.
    assert tiled.configs_for_precision(tiled.INTERPRETER_CONFIGS, {}, INPUT_PRECISION="ieee") \
        == tiled.INTERPRETER_CONFIGS


# --- the switch: the MLP trained with every GEMM in Triton ---------------------------------------

SWITCH_SETUP = {"hidden": 19, "batch_size": 12, "lr": 0.5, "images": 24, "features": 50}


def _two_sgd_steps(gemm: str, device: torch.device) -> model.Params:
    """Two SGD steps on a tiny set, every GEMM through `gemm`. Inputs in [0, 1] keep the hidden
    units in the sigmoid's linear range, so every one of the five GEMMs shows in the updates.
    TF32 for both kernels (the Triton kernel follows torch's switch): the comparison is kernel
    against kernel in the same arithmetic (nothing changes on a CPU, where the interpreter and
    torch both compute in fp32)."""
    g = torch.Generator().manual_seed(3)
    X = torch.rand(SWITCH_SETUP["images"], SWITCH_SETUP["features"], generator=g)
    y = torch.randint(0, model.NUM_CLASSES, (SWITCH_SETUP["images"],), generator=g)
    config = MLPConfig(hidden=SWITCH_SETUP["hidden"], batch_size=SWITCH_SETUP["batch_size"],
                       lr=SWITCH_SETUP["lr"], gemm=gemm)
    with fp32_math(matmul="tf32"):
        return train_sequential(X, y, config, torch.float32, device).params


def update_errors(params: model.Params, reference: model.Params, start: model.Params
                  ) -> dict[str, float]:
    """||dP - dP_ref|| / ||dP_ref|| per parameter tensor, dP = P - P_start: the error of what
    training changed, not of the parameters, which the initial draw dominates (a 0.01 draw
    hides any error in a step 100 times smaller)."""
    errors = {}
    for name, p, ref, p0 in zip(model.Params.names(), params.tensors(), reference.tensors(),
                                start.tensors(), strict=True):
        step, step_ref = (p.double().cpu() - p0.double().cpu(),
                          ref.double().cpu() - p0.double().cpu())
        errors[name] = ((step - step_ref).norm() / step_ref.norm()).item()
    return errors


def _update_tolerance(device: torch.device) -> float:
    """32 unit roundoffs of the GEMMs' arithmetic: tf32 keeps 10 mantissa bits (u = 2^-11), the
    interpreter's fp32 23 (u = 2^-24). Measured, the update errors are about 5 u: 3e-7 between
    the interpreted kernel and torch.matmul in fp32; 2.5e-3 between a tf32 GEMM that rounds its
    inputs to nearest and one that truncates them (CPU emulation of the two steps), the widest
    honest tf32 gap. A GEMM that drops its last K tile moves them by 0.17 to 1."""
    u = 2.0**-11 if device.type == "cuda" else 2.0**-24
    return 32 * u


@pytest.mark.hpml_devices("cpu", "cuda")
def test_mlp_trains_the_same_with_the_tiled_matmul(hpml, device):
    """The switch: two SGD steps with every GEMM in Triton against torch.matmul (small, so the
    interpreter stays quick), compared on the parameter updates."""
    _needs_triton_on(hpml.device)
    start = model.init_params(SWITCH_SETUP["hidden"], input_size=SWITCH_SETUP["features"])
    errors = update_errors(_two_sgd_steps("triton", hpml.device),
                           _two_sgd_steps("torch", hpml.device), start)
    for name, error in errors.items():
        hpml.check(f"update_rel_error_{name}", error, at_most=_update_tolerance(hpml.device))


def _dropping_the_last_k_tile(block_k: int):
    """The tiled matmul with a classic bug: its K loop stops one tile early."""
    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        kept = (a.shape[1] - 1) // block_k * block_k
        return tiled_matmul(a[:, :kept], b[:kept])
    return matmul


def test_the_update_check_catches_a_dropped_k_tile(monkeypatch):
    """The check of test_mlp_trains_the_same_with_the_tiled_matmul can fail: with the last K
    tile of every GEMM dropped, every parameter's update error is far above its tolerance.
    (The old check, a GEMM-output atol on the parameters themselves, let this pass on a GPU.)"""
    _needs_triton_on(torch.device("cpu"))
    block_k = tiled.CONFIGS[0].kwargs["BLOCK_K"]
    monkeypatch.setattr(tiled, "tiled_matmul", _dropping_the_last_k_tile(block_k))
    start = model.init_params(SWITCH_SETUP["hidden"], input_size=SWITCH_SETUP["features"])
    cpu = torch.device("cpu")
    errors = update_errors(_two_sgd_steps("triton", cpu), _two_sgd_steps("torch", cpu), start)
    # Above the fp32 tolerance of the CPU test by far, and above the GPU test's tf32 one (2000
    # times looser) by ten times: the smallest error is b[1]'s, 0.17, whose gradient is a sum
    # of dZ2 that only the forward GEMMs feed.
    assert min(errors.values()) > _update_tolerance(torch.device("cuda")), errors


MLP_GEMMS = {  # (M, K, N) of the step's GEMMs at the published size (B = 3000, H = 512)
    "forward_layer0": (3000, 784, 512), "backward_dW0": (512, 3000, 784),
    "forward_layer1": (3000, 512, 10),
}


@pytest.mark.hpml_devices("cuda")
@pytest.mark.hpml_pivot(index=["gemm", "math"], columns="kernel", metrics=["achieved_flops"])
@pytest.mark.parametrize("kernel", ["triton_tiled", "torch.matmul"])
@pytest.mark.parametrize("math", ["tf32", "ieee"])
@pytest.mark.parametrize("gemm", list(MLP_GEMMS))
def test_tiled_matmul_speed(hpml, device, gemm, math, kernel):  # pragma: no cover - GPU only
    hpml.experiment = "MLP: Triton tiled matmul vs torch.matmul (fp32 inputs)"
    m, k, n = MLP_GEMMS[gemm]
    a = torch.randn(m, k, device=hpml.device)
    b = torch.randn(k, n, device=hpml.device)
    fn = tiled_matmul if kernel == "triton_tiled" else torch.matmul
    # tf32 tolerances hold for both: IEEE fp32 is only more accurate.
    rtol, atol = _tolerance(hpml.device, k)
    # Both kernels in the same arithmetic, tensor cores (tf32) or CUDA cores (IEEE fp32): the
    # Triton kernel reads the switch torch.matmul obeys.
    with fp32_math(matmul=math):
        hpml.check_close(fn(a, b).double(), a.double() @ b.double(), rtol=rtol, atol=atol)
        timing = hpml.time(fn, a, b)
    hpml.record_flops("achieved_flops", 2 * m * k * n, timing)
