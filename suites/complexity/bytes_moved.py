"""Bytes moved by a forward pass, counted at the ATen level with a TorchDispatchMode.

Every op that reaches the dispatcher reads its tensor inputs and writes its tensor outputs at
least once, so summing those sizes over the ops of a pass is a lower bound on the DRAM traffic an
unfused implementation needs (caches can only help inside an op, not across ops the kernel
library does not fuse). This replaces ncu's dram__bytes counters on any device, including meta.

How a tensor is sized: the distinct elements it addresses, times the element size. Not
``untyped_storage().nbytes()``: a view or slice would then be charged for its whole base buffer
(a BatchNorm reading one channel, a conv reading a slice of a stacked weight), overcounting.
Not plain ``numel * element_size`` either: a broadcast (stride 0, e.g. an expanded bias) would be
charged once per repetition although its memory is read once. View ops (``aten.view``,
``aten.t``, ``aten.detach``...) move no data and are not counted; neither are ``empty`` factories,
which only reserve memory.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements a tensor addresses (broadcast dimensions counted once)."""
    distinct = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride)
    return distinct * t.element_size()


def _moves_no_data(func: torch._ops.OpOverload) -> bool:
    return func.is_view or func.__name__.startswith(("empty", "_empty"))


@dataclass
class BytesMovedMode(TorchDispatchMode):
    """Sums input + output tensor bytes over every op dispatched while active."""

    total: int = 0
    by_op: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def __post_init__(self) -> None:
        super().__init__()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if not _moves_no_data(func):
            tensors = [
                t for t in tree_leaves((args, kwargs, out)) if isinstance(t, torch.Tensor)
            ]
            moved = sum(tensor_bytes(t) for t in tensors)
            self.total += moved
            self.by_op[str(func.overloadpacket)] += moved
        return out


def count_forward_bytes(model: nn.Module, inputs: torch.Tensor) -> BytesMovedMode:
    """Bytes moved by one inference forward pass (eval mode, no autograd)."""
    model.eval()
    mode = BytesMovedMode()
    with torch.no_grad(), mode:
        model(inputs)
    return mode
