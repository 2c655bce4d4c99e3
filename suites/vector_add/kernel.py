"""One Triton vector-add kernel and its launcher for the lab's three launch configurations.

The lab's CUDA scenarios are <<<1, 1>>>, <<<1, 256>>> and <<<ceil(N / 256), 256>>>. In Triton a
program processes BLOCK elements per step with num_warps warps, so the same three shapes are:

    (a) one program, BLOCK = 1, one warp: one element per loop step (Triton always launches
        whole warps; with a one-element block the work is that of a single lane)
    (b) one program, BLOCK = 256, 8 warps (256 lanes, one element each per loop step)
    (c) ceil(N / 256) programs of BLOCK = 256, 8 warps: each program's loop runs once

The kernel is written as a grid-stride loop so that one source serves all three.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl


@triton.jit
def vector_add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK: tl.constexpr):
    pid = tl.program_id(axis=0)
    # Grid-stride loop: program p handles blocks p, p + P, p + 2P, ... until the array ends.
    stride = tl.num_programs(axis=0) * BLOCK
    for start in tl.range(pid * BLOCK, n_elements, stride):
        offsets = start + tl.arange(0, BLOCK)
        mask = offsets < n_elements  # the last block may run past the end of the array
        x = tl.load(x_ptr + offsets, mask=mask)
        y = tl.load(y_ptr + offsets, mask=mask)
        tl.store(out_ptr + offsets, x + y, mask=mask)


@dataclass(frozen=True)
class LaunchConfig:
    """A launch shape: how many programs, how many elements each handles per step."""

    name: str
    block: int
    num_warps: int
    one_program: bool  # True: a single program loops over everything; False: one per block

    def grid(self, n_elements: int) -> tuple[int]:
        if self.one_program:
            return (1,)
        return (max(1, triton.cdiv(n_elements, self.block)),)

    @property
    def label(self) -> str:
        """Programs x lanes, as the report's column names show it."""
        return {"a": "(a) 1x1", "b": "(b) 1x256", "c": "(c) N/256x256"}[self.name]


CONFIGS: dict[str, LaunchConfig] = {
    "a": LaunchConfig("a", block=1, num_warps=1, one_program=True),
    "b": LaunchConfig("b", block=256, num_warps=8, one_program=True),
    "c": LaunchConfig("c", block=256, num_warps=8, one_program=False),
}


def config(name: str) -> LaunchConfig:
    """The launch configuration called `name` ("a", "b" or "c")."""
    try:
        return CONFIGS[name]
    except KeyError:
        raise ValueError(f"unknown launch configuration {name!r}: use one of "
                         f"{', '.join(sorted(CONFIGS))}") from None


def vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, cfg: LaunchConfig) -> None:
    """out = x + y with the Triton kernel in configuration `cfg` (asynchronous on CUDA)."""
    if not (x.shape == y.shape == out.shape and x.dim() == 1):
        raise ValueError(f"vector_add needs three 1-D tensors of one length, got shapes "
                         f"{tuple(x.shape)}, {tuple(y.shape)}, {tuple(out.shape)}")
    if not (x.dtype == y.dtype == out.dtype == torch.float32):
        raise ValueError(f"vector_add is the lab's float32 kernel, got dtypes "
                         f"{x.dtype}, {y.dtype}, {out.dtype}")
    if not (x.is_contiguous() and y.is_contiguous() and out.is_contiguous()):
        raise ValueError("vector_add needs contiguous tensors: call .contiguous() first")
    n = x.numel()
    vector_add_kernel[cfg.grid(n)](x, y, out, n, BLOCK=cfg.block, num_warps=cfg.num_warps)
