"""int8 x int8 -> int32 GEMM in Triton with fused epilogues, and its torch reference.

    C = A @ B        A: (M, K) int8, B: (K, N) int8, int32 accumulation, then one of
      int32:      acc (+ int32 bias)
      float:      (acc (+ int32 bias)) * row_scale[m] * col_scale[n] (+ float32 bias)
      requantize: clamp(round((acc + int32 bias) * M0[n] * 2^-(31 + shift[n])) + zp) -> int8

An int32 bias lives in the accumulator's scale (S_a * S_b, Jacob et al.); a float32 bias is added
after the scales. Kernel structure follows Triton's matmul tutorial: grouped program order for
L2 reuse, explicit K masks, constexpr block sizes, autotune configs listed here for the GPU. Under
TRITON_INTERPRET=1 every autotune config would be interpreted, so the CPU uses one config sized
to the problem; the tests still run each GPU config once in the interpreter, at a small odd
shape (`_launch(..., config=...)`), so its masks and program order are checked before a GPU
compiles it.
"""
from __future__ import annotations

import enum
import os
from typing import Any

import torch
import triton
import triton.language as tl

from suites.quantization.fixed_point import M0_BITS, FixedPointMultiplier, requantize


class Epilogue(enum.IntEnum):
    INT32 = 0  # store the int32 accumulator
    FLOAT = 1  # scale rows and columns to float32
    REQUANTIZE = 2  # fixed-point rescale to int8


class Bias(enum.IntEnum):
    NONE = 0
    INT32 = 1  # added to the accumulator, in its scale
    FLOAT = 2  # added after the float scales


# The kernel's view of the same modes: a kernel may read a global only as a tl.constexpr, and
# branches on these at compile time.
EPILOGUE_INT32 = tl.constexpr(Epilogue.INT32.value)
EPILOGUE_FLOAT = tl.constexpr(Epilogue.FLOAT.value)
BIAS_INT32 = tl.constexpr(Bias.INT32.value)
BIAS_FLOAT = tl.constexpr(Bias.FLOAT.value)

#: The largest K whose sums cannot overflow int32: each product is at most 128 x 128 = 2^14
#: in magnitude (-128 x -128), and 2^17 of them reach 2^31.
MAX_K = (2**31 - 1) // (128 * 128)
#: Triton specializes an int argument on its divisibility by 16. With K a multiple of 16 the
#: operands' rows are 16-byte aligned and the K loop loads 16 int8 at a time; with the CNN's
#: K = 75, 150, 120, 84 the loads were single bytes and every tile of 128x64 or more spilled
#: 1.4 to 18.6 KB. So K is padded with zeros, which add nothing to the sums.
K_ALIGNMENT = 16

# Large tiles for the compute-bound square GEMMs, thin ones for the CNN's N = 6 .. 120 layers.
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 128, "GROUP_M": 8},
                  num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8},
                  num_stages=3, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8},
                  num_stages=4, num_warps=8),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8},
                  num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 128, "GROUP_M": 8},
                  num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8},
                  num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 32, "BLOCK_K": 64, "GROUP_M": 8},
                  num_stages=4, num_warps=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 16, "BLOCK_K": 64, "GROUP_M": 8},
                  num_stages=3, num_warps=2),
]


@triton.jit
def int8_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, row_scale_ptr, col_scale_ptr, m0_ptr, shift_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    out_zero_point, out_min, out_max,
    EPILOGUE: tl.constexpr, BIAS: tl.constexpr,
    HAS_ROW_SCALE: tl.constexpr, HAS_COL_SCALE: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Grouped ordering: GROUP_M row blocks share the same column blocks of B while in L2.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    # Rows/columns past the edge wrap around to valid ones (their results are never stored),
    # so the inner loop needs a mask on K only.
    a_ptrs = a_ptr + (offs_m % M)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + (offs_n % N)[None, :] * stride_bn

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.int32)
    for k0 in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k0 * BLOCK_K
        a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0)
        # out_dtype said: int8 operands, exact int32 accumulation (Triton before 3.8 asserts that
        # acc's type is out_dtype, whose default is float32)
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    mask_m = offs_m < M
    mask_n = offs_n < N
    if BIAS == BIAS_INT32:
        acc += tl.load(bias_ptr + offs_n, mask=mask_n, other=0)[None, :]
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    c_mask = mask_m[:, None] & mask_n[None, :]
    if EPILOGUE == EPILOGUE_INT32:
        tl.store(c_ptrs, acc, mask=c_mask)
    elif EPILOGUE == EPILOGUE_FLOAT:
        out = acc.to(tl.float32)
        if HAS_ROW_SCALE:
            out = out * tl.load(row_scale_ptr + offs_m, mask=mask_m, other=0.0)[:, None]
        if HAS_COL_SCALE:
            out = out * tl.load(col_scale_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
        if BIAS == BIAS_FLOAT:
            out += tl.load(bias_ptr + offs_n, mask=mask_n, other=0.0)[None, :]
        tl.store(c_ptrs, out, mask=c_mask)
    else:
        # Fixed-point rescale: int64 product with M0, one rounding right shift by 31 + shift.
        m0 = tl.load(m0_ptr + offs_n, mask=mask_n, other=0).to(tl.int64)
        total_shift = tl.load(shift_ptr + offs_n, mask=mask_n, other=0).to(tl.int64) + 31
        one = tl.full((BLOCK_N,), 1, tl.int64)
        rounding = one << (total_shift - 1)
        scaled = (acc.to(tl.int64) * m0[None, :] + rounding[None, :]) >> total_shift[None, :]
        out = tl.minimum(tl.maximum(scaled + out_zero_point, out_min), out_max)
        tl.store(c_ptrs, out.to(tl.int8), mask=c_mask)


def prune_oversized_tiles(configs: list[triton.Config], named_args: dict[str, Any],
                          **kwargs: Any) -> list[triton.Config]:
    """The autotuner's early prune: drop configs whose tile is far larger than the problem.

    A tile more than twice the problem's size rounded up to a power of two, along M, N or K,
    launches the same programs as a smaller one and computes mostly padding; on a cold Triton
    cache each such config is one more compilation per flag combination (the CNN's N = 6 .. 120
    layers would compile and time the 256-wide tiles for six columns). Along each dimension the
    smallest block in the list always stays, so some config remains for any problem."""
    kept = list(configs)
    for dim in ("M", "N", "K"):
        block = f"BLOCK_{dim}"
        smallest = min(cfg.kwargs[block] for cfg in configs)
        limit = max(2 * triton.next_power_of_2(int(named_args[dim])), smallest)
        kept = [cfg for cfg in kept if cfg.kwargs[block] <= limit]
    # Each dimension keeps its own smallest block, but no single config need hold all three.
    return kept or [min(configs, key=lambda cfg: cfg.kwargs["BLOCK_M"] * cfg.kwargs["BLOCK_N"]
                                                 * cfg.kwargs["BLOCK_K"])]


#: (BLOCK_M, BLOCK_N, BLOCK_K, num_warps) of the configs that spill registers on a GPU, found
#: by compiling every config for it (test_quantization_int8_gemm_compiled fails if one that
#: spills is left to the autotuner). On sm_80 mma.sync keeps its operand fragments in registers
#: beside 128 int32 accumulators per thread in these tiles: every epilogue spills (688-984 B;
#: the requantize epilogue of 128x128x64, 11 KB). sm_90's wgmma reads its operands from shared
#: memory: only the requantize epilogue's int64 arithmetic spills, in the 8-warp tiles.
SPILLING = {80: {(128, 256, 128, 8), (256, 128, 128, 8), (128, 128, 64, 4)}}
SPILLING_REQUANTIZE = {90: {(128, 256, 128, 8), (256, 128, 128, 8)}}


def spills_on(capability: int | None, config: triton.Config, epilogue: int) -> bool:
    """Whether `config` spills on a GPU of this compute capability (80, 90) for `epilogue`."""
    tile = (*(config.kwargs[k] for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K")), config.num_warps)
    return tile in SPILLING.get(capability, ()) or (
        epilogue == Epilogue.REQUANTIZE and tile in SPILLING_REQUANTIZE.get(capability, ()))


def configs_for_gpu(configs: list[triton.Config], named_args: dict[str, Any], epilogue: int,
                    capability: int | None) -> list[triton.Config]:
    """The configs the autotuner times for this launch on this GPU: none that spills there,
    none far larger than the problem (prune_oversized_tiles)."""
    fit = [cfg for cfg in configs if not spills_on(capability, cfg, epilogue)]
    return prune_oversized_tiles(fit or list(configs), named_args)


def current_capability() -> int | None:
    """The compute capability of this process's GPU (80, 90), None without one."""
    if interpreting():
        return None
    target = triton.runtime.driver.active.get_current_target()
    return int(target.arch) if target.backend == "cuda" else None


def prune_configs(configs: list[triton.Config], named_args: dict[str, Any],
                  **kwargs: Any) -> list[triton.Config]:
    """The autotuner's early prune, for the GPU it runs on and the launch's epilogue."""
    return configs_for_gpu(configs, named_args, kwargs["EPILOGUE"], current_capability())


# The best tile depends on the layout as well as the shape (as for the MLP's tiled matmul): the
# operands' strides are part of the key, so a transposed B is tuned on its own.
AUTOTUNE_KEY = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "EPILOGUE",
                "BIAS", "HAS_ROW_SCALE", "HAS_COL_SCALE"]
int8_gemm_autotuned = triton.autotune(
    configs=GPU_CONFIGS, key=AUTOTUNE_KEY, prune_configs_by={"early_config_prune": prune_configs},
)(int8_gemm_kernel)

assert M0_BITS == 31  # the kernel's "+ 31" is fixed_point.M0_BITS


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def _interpreter_config(M: int, N: int, K: int) -> dict[str, int]:
    """One config sized to the problem: the interpreter pays ~20 ms of Python per program
    instance, so few tall row blocks are far cheaper than many small ones."""
    def fit(n: int, lo: int, hi: int) -> int:
        return max(lo, min(hi, triton.next_power_of_2(n)))
    return {"BLOCK_M": fit(M, 16, 1024), "BLOCK_N": fit(N, 16, 64), "BLOCK_K": fit(K, 16, 128),
            "GROUP_M": 8}


def _check_operands(a: torch.Tensor, b: torch.Tensor) -> None:
    if a.dtype != torch.int8 or b.dtype != torch.int8:
        raise TypeError(f"int8_gemm needs int8 operands, got {a.dtype} and {b.dtype}; "
                        "quantize them first (scales.quantize)")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"int8_gemm needs A (M, K) and B (K, N), got {tuple(a.shape)} and "
                         f"{tuple(b.shape)}")
    if a.device != b.device:
        raise ValueError(f"operands on different devices: {a.device} and {b.device}")
    if a.shape[1] > MAX_K:
        raise ValueError(f"K = {a.shape[1]} > {MAX_K}: the sums of 128 x 128 products can "
                         "overflow the int32 accumulator, and GPUs overflow differently (sm_80's "
                         "IMMA saturates, sm_90's wgmma wraps); split K into parts")


def _epilogue(bias, row_scale, col_scale, multiplier) -> tuple[Epilogue, Bias]:
    if multiplier is not None and (row_scale is not None or col_scale is not None):
        raise ValueError("choose either float scales or a requantize multiplier, not both")
    epilogue = (Epilogue.REQUANTIZE if multiplier is not None else
                Epilogue.FLOAT if row_scale is not None or col_scale is not None else
                Epilogue.INT32)
    if bias is None:
        return epilogue, Bias.NONE
    if bias.dtype == torch.int32:
        return epilogue, Bias.INT32
    if bias.dtype == torch.float32 and epilogue == Epilogue.FLOAT:
        return epilogue, Bias.FLOAT
    raise TypeError("bias must be int32 (accumulator scale) or float32 with a float epilogue, "
                    f"got {bias.dtype}")


def int8_gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
              row_scale: torch.Tensor | None = None, col_scale: torch.Tensor | None = None,
              multiplier: FixedPointMultiplier | None = None, zero_point: int = 0,
              qmin: int = -128, qmax: int = 127) -> torch.Tensor:
    """A @ B with int32 accumulation and the epilogue chosen by the arguments (module doc).

    Returns int32 (no scales, no multiplier), float32 (row/col scales) or int8 (multiplier)."""
    return _int8_gemm(a, b, bias=bias, row_scale=row_scale, col_scale=col_scale,
                      multiplier=multiplier, zero_point=zero_point, qmin=qmin, qmax=qmax)


def _int8_gemm(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
               row_scale: torch.Tensor | None = None, col_scale: torch.Tensor | None = None,
               multiplier: FixedPointMultiplier | None = None, zero_point: int = 0,
               qmin: int = -128, qmax: int = 127, config: triton.Config | None = None,
               out: torch.Tensor | None = None) -> torch.Tensor:
    """int8_gemm with two hooks for the tests. `config`: run this one triton.Config (a GPU
    config under the interpreter, say) instead of the autotuner's or the interpreter's choice.
    `out`: the tensor the kernel writes, so that a test can poison it first and see an element
    no program wrote."""
    _check_operands(a, b)
    epilogue, bias_mode = _epilogue(bias, row_scale, col_scale, multiplier)
    if a.device.type == "cpu" and not interpreting():
        raise RuntimeError("Triton kernels on CPU tensors need TRITON_INTERPRET=1 set before "
                           "triton is imported (pytest-hpml sets it when no GPU exists); "
                           "otherwise move the operands to CUDA")
    M, K = a.shape
    N = b.shape[1]
    out_dtype = {Epilogue.INT32: torch.int32, Epilogue.FLOAT: torch.float32,
                 Epilogue.REQUANTIZE: torch.int8}[epilogue]
    for name, t, n in (("bias", bias, N), ("row_scale", row_scale, M),
                       ("col_scale", col_scale, N),
                       ("multiplier", multiplier.m0 if multiplier else None, N)):
        if t is not None and torch.as_tensor(t).numel() not in (1, n):
            raise ValueError(f"{name} must have 1 or {n} elements, "
                             f"got {torch.as_tensor(t).numel()}")
    if out is None:
        c = torch.empty((M, N), dtype=out_dtype, device=a.device)
    elif out.shape != (M, N) or out.dtype != out_dtype or out.device != a.device:
        raise ValueError(f"out must be a ({M}, {N}) {out_dtype} tensor on {a.device}, got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    else:
        c = out
    if M == 0 or N == 0:
        return c
    if K == 0:  # an empty sum; the kernel would never run its loop
        return c.copy_(int8_gemm_reference(a, b, bias=bias, row_scale=row_scale,
                                           col_scale=col_scale, multiplier=multiplier,
                                           zero_point=zero_point, qmin=qmin, qmax=qmax))

    def vector(t: torch.Tensor | None, dtype: torch.dtype, n: int) -> torch.Tensor:
        if t is None:
            return c  # never read: the constexpr flags compile its loads away
        t = torch.as_tensor(t, dtype=dtype, device=a.device).flatten()
        return (t.expand(n) if t.numel() == 1 else t).contiguous()

    a, b = pad_k(a, b)
    K = a.shape[1]
    fpm = multiplier.to(a.device) if multiplier is not None else None
    args = (
        a, b, c,
        vector(bias, bias.dtype if bias is not None else torch.int32, N),
        vector(row_scale, torch.float32, M), vector(col_scale, torch.float32, N),
        vector(fpm.m0 if fpm else None, torch.int32, N),
        vector(fpm.shift if fpm else None, torch.int32, N),
        M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        zero_point, qmin, qmax,
    )
    flags = {"EPILOGUE": int(epilogue), "BIAS": int(bias_mode),
             "HAS_ROW_SCALE": row_scale is not None, "HAS_COL_SCALE": col_scale is not None}
    _launch(args, flags, M, N, K, config)
    return c


def pad_k(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A (M, K) and B (K, N) with K padded with zeros to a multiple of K_ALIGNMENT (unchanged
    when it is one): A row-major and B K-major, the layouts the kernel loads 16 bytes at a time.
    Callers that run the same K often (a model's layers) pad once instead (integer_model)."""
    k = a.shape[1]
    padded = -(-k // K_ALIGNMENT) * K_ALIGNMENT
    if padded == k:
        return a, b
    a_padded = torch.zeros((a.shape[0], padded), dtype=a.dtype, device=a.device)
    a_padded[:, :k] = a
    b_padded = torch.zeros((b.shape[1], padded), dtype=b.dtype, device=b.device).t()
    b_padded[:k] = b
    return a_padded, b_padded


def _launch(args: tuple, flags: dict[str, Any], M: int, N: int, K: int,
            config: triton.Config | None) -> None:
    """Run the kernel with `config`, else the autotuner's choice on a GPU and a problem-sized
    config in the interpreter."""
    if config is None and not interpreting():  # GPU path: the autotuner compiles and times
        def grid(meta: dict[str, Any]) -> tuple[int]:
            return (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
        int8_gemm_autotuned[grid](*args, **flags)
        return
    # all_kwargs: the block sizes and num_warps / num_stages (the interpreter ignores those).
    meta = (config.all_kwargs() if config is not None else _interpreter_config(M, N, K))
    grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    int8_gemm_kernel[grid](*args, **flags, **meta)


def int8_gemm_reference(a: torch.Tensor, b: torch.Tensor, *, bias: torch.Tensor | None = None,
                        row_scale: torch.Tensor | None = None,
                        col_scale: torch.Tensor | None = None,
                        multiplier: FixedPointMultiplier | None = None, zero_point: int = 0,
                        qmin: int = -128, qmax: int = 127) -> torch.Tensor:
    """The same contract in torch ops. The product is taken in float64, which is exact here
    (every partial sum is an integer below 2^53) and runs on any device, unlike int64 matmul."""
    _check_operands(a, b)
    epilogue, bias_mode = _epilogue(bias, row_scale, col_scale, multiplier)
    acc = (a.double() @ b.double()).to(torch.int32)
    if bias_mode == Bias.INT32:
        acc = acc + bias.to(acc.device).flatten()
    if epilogue == Epilogue.INT32:
        return acc
    if epilogue == Epilogue.REQUANTIZE:
        return requantize(acc, multiplier, zero_point, qmin, qmax)
    out = acc.to(torch.float32)
    # Same operation order as the kernel, so float results match bit for bit.
    if row_scale is not None:
        out = out * torch.as_tensor(row_scale, dtype=torch.float32,
                                    device=out.device).flatten()[:, None]
    if col_scale is not None:
        out = out * torch.as_tensor(col_scale, dtype=torch.float32, device=out.device).flatten()
    if bias_mode == Bias.FLOAT:
        out = out + bias.to(out.device).flatten()
    return out
