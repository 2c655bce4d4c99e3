"""The lab's TiledMatMul in Triton: C = A @ B for fp32 inputs, one output tile per program.

Each program owns a BLOCK_M x BLOCK_N tile of C and walks K in BLOCK_K steps, loading a tile of
A and a tile of B (the shared-memory tiles of the CUDA version) and accumulating in fp32. Strides
are arguments, so transposed views (W.T, dZ.T in the MLP's backward pass) need no copy. Masks
cover the ragged edges, so any shape works, odd ones included.

On a GPU tl.dot uses tf32 tensor cores for fp32 inputs (as torch.matmul does when fp32 matmuls
are allowed tf32); under TRITON_INTERPRET=1 it runs in full fp32 on the CPU, slowly: correctness
only.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

# The tile configurations a GPU autotunes over. Listed on their own so that the tests can run
# each of them once under the interpreter (masks, ragged edges) before a GPU ever does.
GPU_CONFIGS = [
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=8, num_stages=3),
    triton.Config({"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=4),
    triton.Config({"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 32}, num_warps=4, num_stages=5),
    triton.Config({"BLOCK_M": 64, "BLOCK_N": 32, "BLOCK_K": 32}, num_warps=4, num_stages=5),
]
# The interpreter runs every program in Python: one small config, no autotuning sweep.
INTERPRETER_CONFIGS = [triton.Config({"BLOCK_M": 16, "BLOCK_N": 16, "BLOCK_K": 16})]
INTERPRETED = os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
CONFIGS = INTERPRETER_CONFIGS if INTERPRETED else GPU_CONFIGS
# The best tile depends on the layout as well as the shape: a transposed operand (the MLP's
# backward feeds W.T and dZ.T views) walks memory differently, so the input strides are part of
# the key and a transposed call is tuned on its own instead of reusing the row-major choice.
AUTOTUNE_KEY = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn"]


@triton.jit
def tiled_matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
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
        acc += tl.dot(a, b)
    tl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :] * stride_cn, acc,
             mask=(rows[:, None] < M) & (cols[None, :] < N))


tiled_matmul_autotuned = triton.autotune(configs=CONFIGS, key=AUTOTUNE_KEY)(tiled_matmul_kernel)


def tiled_matmul(a: torch.Tensor, b: torch.Tensor,
                 config: triton.Config | None = None) -> torch.Tensor:
    """a (M, K) @ b (K, N) -> (M, N), fp32, on the device of the inputs.

    The tile configuration is autotuned among CONFIGS; `config` runs that one instead (a test
    of one configuration, or a measurement of it).
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

    args = (a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
            c.stride(1))
    if config is None:
        tiled_matmul_autotuned[grid](*args)
    else:
        tiled_matmul_kernel[grid](*args, **config.all_kwargs())
    return c
