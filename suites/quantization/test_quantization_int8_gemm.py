"""The Triton int8 GEMM, bit for bit against torch's integer reference of the same contract:
odd shapes (M, N, K not multiples of any block size), strided B (a weight's transpose), and
every epilogue: int32 (+ bias), float scales (+ bias), fixed-point requantize to int8. Then every
GPU autotune config on its own, at shapes cut to its tiles, and the autotuner's pruning of tiles
far larger than the problem.

On CPU this runs in Triton's interpreter; on a GPU the same test runs the compiled, autotuned
kernel (the cuda case, marked gpu)."""
from __future__ import annotations

import pytest
import torch
import triton
from triton.runtime.errors import OutOfResources

from suites.quantization import int8_gemm as int8_gemm_module
from suites.quantization.fixed_point import FixedPointMultiplier
from suites.quantization.int8_gemm import (
    AUTOTUNE_KEY,
    GPU_CONFIGS,
    MAX_K,
    Epilogue,
    _int8_gemm,
    configs_for_gpu,
    int8_gemm,
    int8_gemm_autotuned,
    int8_gemm_reference,
    interpreting,
    pad_k,
    prune_configs,
    prune_oversized_tiles,
    spills_on,
)
from suites.quantization.integer_model import im2col

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
    # ReLU folded (zero point 0, lower rail 0) and a plain asymmetric output: one check each.
    for zero_point, qmin, name in ((0, 0, "max_rel_error"),
                                   (-5, -128, "asymmetric_max_rel_error")):
        out = int8_gemm(a, b, bias=bias, multiplier=multiplier, zero_point=zero_point,
                        qmin=qmin, qmax=127)
        expected = int8_gemm_reference(a, b, bias=bias, multiplier=multiplier,
                                       zero_point=zero_point, qmin=qmin, qmax=127)
        assert out.dtype == torch.int8
        hpml.check_close(out.cpu().int(), expected.cpu().int(), rtol=0, atol=0, name=name)
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


# -- every GPU config, one at a time ------------------------------------------------------------
# The interpreter otherwise only ever runs the problem-sized config of _interpreter_config: the
# GPU configs' block sizes and GROUP_M would first meet their masks on a GPU.

INT32_POISON = -2**31  # no int8 product with a bias in +-2^20 reaches it
INT8_POISON = -128  # outside the [qmin, qmax] = [-100, 100] the test asks for


def _config_id(cfg: triton.Config) -> str:
    kw = cfg.kwargs
    return (f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}-g{kw['GROUP_M']}"
            f"-w{cfg.num_warps}-s{cfg.num_stages}")


def _odd_shapes(cfg: triton.Config) -> dict[str, tuple[int, int, int]]:
    """(M, N, K) that put every mask and the program order of `cfg` to work, as small as that
    allows: N = two column blocks, the second ragged; K = two K steps, the second ragged
    (masked loads); M either below one row block (the tile wraps around the rows) or GROUP_M row
    blocks and a ragged one (a full group, then a group of one: the grouped ordering)."""
    bm, bn, bk, group = (cfg.kwargs[key] for key in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M"))
    n, k = bn + 13, bk + 29
    return {"small": (min(37, bm - 1), n, k), "groups": (group * bm + 37, n, k)}


@pytest.mark.parametrize("config", GPU_CONFIGS, ids=_config_id)
def test_each_gpu_config_is_exact_at_odd_shapes(hpml, device, config):
    device = _device(hpml)
    hpml.experiment = "int8 GEMM: every GPU config at odd shapes"
    hpml.param(config=_config_id(config))
    shapes = _odd_shapes(config)
    m, n, k = shapes["groups"]
    assert triton.cdiv(m, config.kwargs["BLOCK_M"]) == config.kwargs["GROUP_M"] + 1
    assert triton.cdiv(n, config.kwargs["BLOCK_N"]) == 2
    assert triton.cdiv(k, config.kwargs["BLOCK_K"]) == 2
    try:
        for label, (m, n, k) in shapes.items():
            a, b = _operands(m, n, k, device, seed=5)
            bias = torch.randint(-2 ** 20, 2 ** 20, (n,), dtype=torch.int32).to(device)
            # Poisoned output: an element that no program writes cannot match the truth.
            out = torch.full((m, n), INT32_POISON, dtype=torch.int32, device=device)
            _int8_gemm(a, b, bias=bias, config=config, out=out)
            truth = (a.cpu().long() @ b.cpu().long() + bias.cpu().long()).to(torch.int32)
            hpml.check_close(out.cpu(), truth, rtol=0, atol=0, name=f"int32_{label}")
        # The epilogues' row and column loads are masked by the tile too: the small shape, where
        # the tile overhangs the problem most, checks them.
        m, n, k = shapes["small"]
        _check_float_epilogue(hpml, config, m, n, k, device)
        _check_requantize_epilogue(hpml, config, m, n, k, device)
    except OutOfResources as exc:  # pragma: no cover - only a GPU compiles, and may refuse
        # The autotuner skips such a config on this GPU the same way.
        pytest.skip(f"config {_config_id(config)} does not fit this GPU: {exc}")


def _check_float_epilogue(hpml, config: triton.Config, m: int, n: int, k: int,
                          device: torch.device) -> None:
    a, b = _operands(m, n, k, device, seed=6)
    g = torch.Generator().manual_seed(7)
    row = (torch.rand(m, generator=g) * 0.02 + 1e-3).to(device)
    col = (torch.rand(n, generator=g) * 0.02 + 1e-3).to(device)
    bias = torch.randn(n, generator=g).to(device)
    out = torch.full((m, n), float("nan"), device=device)
    _int8_gemm(a, b, row_scale=row, col_scale=col, bias=bias, config=config, out=out)
    expected = int8_gemm_reference(a, b, row_scale=row, col_scale=col, bias=bias)
    tol = 0 if device.type == "cpu" else 1e-6  # a GPU may contract to an FMA
    hpml.check_close(out.cpu(), expected.cpu(), rtol=tol, atol=tol, name="float_small")


def _check_requantize_epilogue(hpml, config: triton.Config, m: int, n: int, k: int,
                               device: torch.device) -> None:
    a, b = _operands(m, n, k, device, seed=8)
    g = torch.Generator().manual_seed(9)
    bias = torch.randint(-5000, 5000, (n,), generator=g, dtype=torch.int32).to(device)
    typical = 100 / (128 * 74 * k ** 0.5)  # as in test_requantize_epilogue_is_bit_exact
    multiplier = FixedPointMultiplier.from_real(
        typical * 10 ** (torch.rand(n, generator=g, dtype=torch.float64) * 2 - 1))
    kwargs = dict(bias=bias, multiplier=multiplier, zero_point=-5, qmin=-100, qmax=100)
    out = torch.full((m, n), INT8_POISON, dtype=torch.int8, device=device)
    _int8_gemm(a, b, **kwargs, config=config, out=out)
    expected = int8_gemm_reference(a, b, **kwargs)
    hpml.check_close(out.cpu().int(), expected.cpu().int(), rtol=0, atol=0,
                     name="requantize_small")


class _LaunchSpy:
    """Stands in for a Triton kernel: `kernel[grid](*args, **kwargs)` records, runs nothing."""

    def __init__(self) -> None:
        self.launches: list[tuple[object, tuple, dict]] = []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.launches.append((grid, args, kwargs))


def test_launch_runs_the_given_config(monkeypatch):
    spy = _LaunchSpy()
    monkeypatch.setattr(int8_gemm_module, "int8_gemm_kernel", spy)
    config = GPU_CONFIGS[-1]
    a, b = _operands(37, 29, 93, torch.device("cpu"))
    _int8_gemm(a, b, config=config)
    (grid, args, kwargs), = spy.launches
    bm, bn = config.kwargs["BLOCK_M"], config.kwargs["BLOCK_N"]
    assert grid == (triton.cdiv(37, bm) * triton.cdiv(29, bn),)
    assert {k: kwargs[k] for k in config.all_kwargs()} == config.all_kwargs()
    assert args[8:11] == (37, 29, 96)  # M, N, and K padded to a multiple of 16


def test_gpu_launch_goes_through_the_autotuner(monkeypatch):
    # The branch a GPU takes, run here with the autotuned kernel replaced by a spy.
    spy = _LaunchSpy()
    monkeypatch.setattr(int8_gemm_module, "int8_gemm_autotuned", spy)
    monkeypatch.setattr(int8_gemm_module, "interpreting", lambda: False)
    flags = {"EPILOGUE": 0, "BIAS": 0, "HAS_ROW_SCALE": False, "HAS_COL_SCALE": False}
    int8_gemm_module._launch(("args",), flags, 300, 70, 64, None)
    (grid, args, kwargs), = spy.launches
    assert args == ("args",) and kwargs == flags  # block sizes are the autotuner's to choose
    assert grid({"BLOCK_M": 128, "BLOCK_N": 32}) == (3 * 3,)
    assert grid({"BLOCK_M": 64, "BLOCK_N": 16}) == (5 * 5,)


def test_out_must_match_the_result():
    a, b = torch.zeros(4, 8, dtype=torch.int8), torch.zeros(8, 3, dtype=torch.int8)
    with pytest.raises(ValueError, match=r"out must be a \(4, 3\) torch.int32 tensor"):
        _int8_gemm(a, b, out=torch.zeros(4, 3, dtype=torch.float32))


# -- the autotuner's pruning ---------------------------------------------------------------------

def _pruned(m: int, n: int, k: int) -> list[triton.Config]:
    return prune_oversized_tiles(GPU_CONFIGS, {"M": m, "N": n, "K": k})


def _blocks(configs: list[triton.Config], dim: str) -> set[int]:
    return {cfg.kwargs[f"BLOCK_{dim}"] for cfg in configs}


def test_autotuner_prunes_tiles_far_larger_than_the_problem():
    assert int8_gemm_autotuned.early_config_prune is prune_configs
    # A large square problem keeps every config.
    assert _pruned(4096, 4096, 4096) == GPU_CONFIGS
    # The CNN's conv1 as im2col (N = 6 output channels): only the 16-wide tile is left, not
    # eight configs to compile and time for six columns.
    assert _blocks(_pruned(1024 * 28 * 28, 6, 75), "N") == {16}
    # fc3 (N = 10) keeps the thin tiles (up to 2 x 16), and loses the 64- to 256-wide ones.
    assert _blocks(_pruned(1024, 10, 84), "N") == {16, 32}
    # fc1 (N = 120): 256 <= 2 x 128, everything stays.
    assert len(_pruned(1024, 120, 400)) == len(GPU_CONFIGS)
    # A few rows: the smallest BLOCK_M in the list (64) is the floor, so both 64-row configs
    # stay (the 128-wide one suits N = 120), not just the one smallest tile.
    kept = _pruned(7, 120, 400)
    assert _blocks(kept, "M") == {64} and _blocks(kept, "N") == {16, 128}


def test_pruning_always_leaves_a_config():
    for m, n, k in [(1, 1, 1), (7, 1, 1), (1, 6, 75), (2, 3, 5)]:
        kept = _pruned(m, n, k)
        assert kept, (m, n, k)
        assert all(cfg in GPU_CONFIGS for cfg in kept)
    # No config holds the smallest block of every dimension: the smallest tile is the answer.
    wide = triton.Config({"BLOCK_M": 16, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8})
    tall = triton.Config({"BLOCK_M": 256, "BLOCK_N": 16, "BLOCK_K": 64, "GROUP_M": 8})
    big = triton.Config({"BLOCK_M": 256, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8})
    assert prune_oversized_tiles([big, wide, tall], {"M": 1, "N": 1, "K": 1}) == [wide]


# -- what compilation for the GPUs found -------------------------------------------------------

def _tile(cfg: triton.Config) -> tuple[int, int, int, int]:
    return (*(cfg.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), cfg.num_warps)


def test_the_autotuner_leaves_out_the_tiles_that_spill_on_each_gpu():
    square = {"M": 4096, "N": 4096, "K": 4096}
    sm80 = {_tile(c) for c in configs_for_gpu(GPU_CONFIGS, square, Epilogue.INT32, 80)}
    assert sm80 == {_tile(c) for c in GPU_CONFIGS} - {
        (128, 256, 128, 8), (256, 128, 128, 8), (128, 128, 64, 4)}
    sm90 = {_tile(c) for c in configs_for_gpu(GPU_CONFIGS, square, Epilogue.INT32, 90)}
    assert sm90 == {_tile(c) for c in GPU_CONFIGS}  # wgmma: nothing spills in int32 ...
    requantize = configs_for_gpu(GPU_CONFIGS, square, Epilogue.REQUANTIZE, 90)
    assert {_tile(c) for c in GPU_CONFIGS} - {_tile(c) for c in requantize} == {
        (128, 256, 128, 8), (256, 128, 128, 8)}  # ... but the int64 rescale does in 8 warps
    assert not any(spills_on(80, c, Epilogue.FLOAT) for c in
                   configs_for_gpu(GPU_CONFIGS, square, Epilogue.FLOAT, 80))
    # The interpreter (no capability) and an unknown GPU keep every config the size allows.
    assert configs_for_gpu(GPU_CONFIGS, square, Epilogue.INT32, None) == GPU_CONFIGS


def test_k_is_padded_with_zeros_to_a_multiple_of_16():
    a, b = _operands(5, 7, 75, torch.device("cpu"))
    a16, b16 = pad_k(a, b)
    assert a16.shape == (5, 80) and b16.shape == (80, 7)
    assert a16.stride() == (80, 1) and b16.stride() == (1, 80)  # row-major A, K-major B
    assert (a16[:, 75:] == 0).all() and (b16[75:] == 0).all()
    assert torch.equal(a16.long() @ b16.long(), a.long() @ b.long())
    aligned = _operands(5, 7, 64, torch.device("cpu"))
    assert pad_k(*aligned) == aligned  # nothing to do: the same tensors


def test_im2col_writes_its_padded_columns_in_its_own_copy():
    x = torch.randint(-128, 128, (2, 3, 9, 9), dtype=torch.int8)
    plain, padded = im2col(x, 5), im2col(x, 5, columns=80)
    assert plain.shape == (2 * 5 * 5, 75) and padded.shape == (2 * 5 * 5, 80)
    assert torch.equal(padded[:, :75], plain) and (padded[:, 75:] == 0).all()


def test_k_beyond_the_int32_bound_is_refused_at_the_bound_exact():
    # 2^17 products of -128 x -128 reach 2^31: one more than int32 holds (the guard let it by).
    meta = torch.device("meta")
    with pytest.raises(ValueError, match=f"K = {MAX_K + 1} > {MAX_K}.*split K"):
        int8_gemm(torch.empty(1, MAX_K + 1, dtype=torch.int8, device=meta),
                  torch.empty(MAX_K + 1, 1, dtype=torch.int8, device=meta))
    a = torch.full((1, MAX_K), -128, dtype=torch.int8)
    assert int8_gemm_reference(a, a.t()).item() == 128 * 128 * MAX_K == 2**31 - 2**14


def test_a_transposed_b_is_tuned_on_its_own(monkeypatch):
    """The strides are in the autotune key (they were not): at one (M, N, K) and epilogue, a
    K-major and an N-major B are two tuning entries. Benchmarking is stubbed: the interpreter
    has no GPU timer, and only the key is under test."""
    if not interpreting():
        pytest.skip("checks the key with CPU tensors in Triton's interpreter (TRITON_INTERPRET=1)")
    assert int8_gemm_autotuned.keys == AUTOTUNE_KEY
    timed: list[str] = []

    def fake_bench(kernel_call, quantiles):
        kernel_call()
        timed.append("timed")
        return [1.0, 1.0, 1.0]

    two = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1}),
           triton.Config({"BLOCK_M": 32, "BLOCK_N": 16, "BLOCK_K": 16, "GROUP_M": 1})]
    kernel = triton.autotune(configs=two, key=AUTOTUNE_KEY, do_bench=fake_bench)(
        int8_gemm_module.int8_gemm_kernel)
    launches = []  # the wrapper's own arguments, then launched through the autotuner
    monkeypatch.setattr(int8_gemm_module, "_launch",
                        lambda args, flags, *_: launches.append((args, flags)))
    a, b = _operands(20, 18, 32, torch.device("cpu"))
    for layout in (b, b.contiguous()):  # K-major (a weight's transpose), then N-major
        int8_gemm(a, layout)
    for args, flags in launches:
        kernel[lambda meta: (triton.cdiv(20, meta["BLOCK_M"]) * triton.cdiv(18, meta["BLOCK_N"]),)](
            *args, **flags)
        torch.testing.assert_close(args[2], (a.long() @ b.long()).int())
    assert len(kernel.cache) == 2, f"one tuning entry for both layouts: {list(kernel.cache)}"
    assert len(timed) == 2 * len(two)
