"""One timed inference forward pass of a lab model, with its FLOPs and bytes counted on meta."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn

from suites.common.precision import fp32_math
from suites.complexity.bytes_moved import count_forward_bytes
from suites.complexity.flops import count_forward_flops
from suites.complexity.models import build_model
from suites.complexity.sizes import timing_image_size


@dataclass
class ForwardCase:
    net: nn.Module
    images: torch.Tensor
    image_size: int
    flops: int  # per forward pass of the whole batch
    bytes_moved: int

    @property
    def arithmetic_intensity(self) -> float:
        return self.flops / self.bytes_moved


def forward_case(model: str, batch: int, device: torch.device, profile: str) -> ForwardCase:
    size = timing_image_size(model, profile)
    shape = (batch, 3, size, size)
    meta_net = build_model(model, "meta")
    meta_images = torch.empty(shape, device="meta")
    flops = count_forward_flops(meta_net, meta_images).total
    moved = count_forward_bytes(meta_net, meta_images).total
    net = build_model(model, device).eval()
    return ForwardCase(net, torch.randn(shape, device=device), size, flops, moved)


def infer(net: nn.Module, images: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return net(images)


@contextlib.contextmanager
def true_fp32(device: torch.device) -> Iterator[None]:
    """cuDNN runs fp32 convolutions on TF32 tensor cores by default, which the fp32 matmul
    ceiling (IEEE fp32 for matmul by default) does not: inside the block both run in IEEE fp32,
    so time and peak describe the same arithmetic. Through the fp32_precision API (torch 2.9+
    raises when it is mixed with the legacy allow_tf32 flags). Nothing to do on CPU."""
    if device.type != "cuda":
        yield
        return
    with fp32_math(matmul="ieee", conv="ieee"):
        yield
