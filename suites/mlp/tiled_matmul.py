"""The lab's TiledMatMul in Triton: C = A @ B for fp32 inputs, one output tile per program.

Each program owns a BLOCK_M x BLOCK_N tile of C and walks K in BLOCK_K steps, loading a tile of
A and a tile of B (the shared-memory tiles of the CUDA version) and accumulating in fp32. Strides
are arguments, so transposed views (W.T, dZ.T in the MLP's backward pass) need no copy. Masks
cover the ragged edges, so any shape works, odd ones included.

On a GPU the product runs as torch.matmul would at the moment of the call: tf32 tensor cores when
fp32 matmuls are allowed tf32 (fp32_math(matmul="tf32")), plain fp32 FMAs when IEEE fp32 is asked
for (tl.dot's input_precision, a constexpr: two compiled variants). Under TRITON_INTERPRET=1 it
runs in full fp32 on the CPU whatever is asked, slowly: correctness only.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl

from suites.common.precision import matmul_precision

# The tile configurations a GPU autotunes over, one list per arithmetic. Listed on their own so
# that the tests can run each of them once under the interpreter (masks, ragged edges) and
# compile each for the A100 and the H100 before a GPU ever does. tf32 tiles feed tensor cores
# (mma / wgmma); IEEE fp32 runs on FFMAs, whose operands and accumulators all sit in registers,
# so its tiles are smaller per thread (BLOCK_K 16 or 8 warps): the tf32 list's 128-wide tiles
# spilled 8 to 984 bytes in IEEE fp32. 32x64 runs 2 warps: with 4 it spilled 12 bytes on sm_90.
# The 64x64 IEEE tiles were 64x64x32-w8-s3 and 64x64x16-w4-s4 until the full compile run found
# them spilling on sm_90 (8 to 16 bytes in the forward GEMMs: ptxas stores two 32-bit values
# before the K loop and reloads them after it, at 80 or 128 registers, far below the 255 allowed).
# 64x64x16 with 8 warps and 3 stages, and with 4 warps and 2 stages, compile clean for every
# GEMM of the step on both targets (64x64x32 with 4 warps spilled 48-64 bytes in the backward
# GEMMs): the same output tile, a shallower pipeline.
TF32_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=2, num_stages=5),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=5),
]
IEEE_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 16}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 16}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 16}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 16}, num_warps=4, num_stages=2),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=4),
]
CONFIGS_BY_PRECISION = {"tf32": TF32_CONFIGS, "ieee": IEEE_CONFIGS}
GPU_CONFIGS = TF32_CONFIGS + IEEE_CONFIGS
# The interpreter runs every program in Python: one small config, no autotuning sweep.
INTERPRETER_CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})]
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
CONFIGS = INTERPRETER_CONFIGS if INTERPRETED else GPU_CONFIGS
# The best tile depends on the layout as well as the shape: a transposed operand (the MLP's
# backward feeds W.T and dZ.T views) walks memory differently, so the input strides are part of
# the key and a transposed call is tuned on its own instead of reusing the row-major choice.
# tf32 and IEEE fp32 are two kernels, with a best tile each.
AUTOTUNE_KEY = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn",
                "INPUT_PRECISION"]


@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        INPUT_PRECISION: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + ks
        a = tl.load(a_ptr + rows[:, None] * stride_am + k[None, :] * stride_ak,
                    mask=(rows[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(b_ptr + k[:, None] * stride_bk + cols[None, :] * stride_bn,
                    mask=(k[:, None] < K) & (cols[None, :] < N), other=0.0)
        acc += tl.dot(a, b, input_precision=INPUT_PRECISION)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


def configs_for_precision(configs: list[triton.Config], named_args: dict[str, Any],
                          **kwargs: Any) -> list[triton.Config]:
    """The autotuner's early prune: the tiles listed for the arithmetic of this launch
    (INPUT_PRECISION); every config where none is (the interpreter's one config)."""
    wanted = CONFIGS_BY_PRECISION[kwargs["INPUT_PRECISION"]]
    return [c for c in configs if any(c is w for w in wanted)] or list(configs)


tiled_matmul_autotuned = triton.autotune(
    configs=CONFIGS, key=AUTOTUNE_KEY,
    prune_configs_by={"early_config_prune": configs_for_precision})(tiled_matmul_kernel)


def tiled_matmul(a: torch.Tensor, b: torch.Tensor, config: triton.Config | None = None,
                 precision: str | None = None) -> torch.Tensor:
    """a (M, K) @ b (K, N) -> (M, N), fp32, on the device of the inputs.

    The tile configuration is autotuned among CONFIGS; `config` runs that one instead (a test
    of one configuration, or a measurement of it). `precision`, "tf32" or "ieee", defaults to
    what torch.matmul would use now (suites.common.precision.fp32_math sets it).
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"tiled_matmul needs (M, K) @ (K, N); got {tuple(a.shape)} @ "
                         f"{tuple(b.shape)}")
    if a.dtype != torch.float32 or b.dtype != torch.float32:
        raise ValueError(f"tiled_matmul takes fp32 inputs, got {a.dtype} and {b.dtype}")
    if a.device != b.device:
        raise ValueError(f"inputs on different devices: {a.device} and {b.device}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=torch.float32, device=a.device)
    if M == 0 or N == 0:
        return c
    if K == 0:  # an empty sum; a rank holding zero rows of a batch lands here
        return c.zero_()

    def grid(meta: dict) -> tuple[int, int]:
        return triton.cdiv(M, meta["BLOCK_M"]), triton.cdiv(N, meta["BLOCK_N"])

    precision = precision or matmul_precision()
    if precision not in ("tf32", "ieee"):
        raise ValueError(f"precision is 'tf32' or 'ieee', not {precision!r}")
    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1))
    if config is None:
        tiled_matmul_autotuned[grid](*args, INPUT_PRECISION=precision)
    else:
        tiled_matmul_kernel[grid](*args, **config.all_kwargs(), INPUT_PRECISION=precision)
    return c
