"""FLOP counting with torch.utils.flop_counter, broken down per layer and per layer type.

flop_counter counts 2 FLOPs per multiply-add of matmuls and convolutions (and attention); it does
not count elementwise work (BatchNorm, ReLU, pooling, residual adds), which is a fraction of a
percent for these networks. Counting on the meta device costs no arithmetic at all.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode


@dataclass
class FlopCount:
    total: int  # whole graph, as flop_counter reports it
    by_layer: dict[str, int]  # leaf module name -> FLOPs
    layer_types: dict[str, str]  # leaf module name -> class name
    by_layer_type: dict[str, int]  # class name (Conv2d, Linear, ...) -> FLOPs

    def share(self, layer_type: str) -> float:
        return self.by_layer_type.get(layer_type, 0) / self.total


def leaf_modules(model: nn.Module) -> dict[str, nn.Module]:
    return {
        name: module
        for name, module in model.named_modules()
        if name and next(module.children(), None) is None
    }


def _group(model: nn.Module, by_layer: dict[str, int], total: int) -> FlopCount:
    layer_types = {name: type(m).__name__ for name, m in leaf_modules(model).items()}
    by_type: dict[str, int] = defaultdict(int)
    for name, flops in by_layer.items():
        by_type[layer_types[name]] += flops
    return FlopCount(total, by_layer, layer_types, dict(by_type))


def count_forward_flops(model: nn.Module, inputs: torch.Tensor) -> FlopCount:
    """FLOPs of one inference forward pass (eval mode, no autograd), per leaf module."""
    counter = FlopCounterMode(display=False)
    model.eval()
    with torch.no_grad(), counter:
        model(inputs)
    counts = counter.get_flop_counts()
    # flop_counter names modules "<RootClass>.<path>"; leaves are where the arithmetic happens.
    prefix = type(model).__name__
    by_layer = {
        name: sum(counts.get(f"{prefix}.{name}", {}).values()) for name in leaf_modules(model)
    }
    return _group(model, by_layer, counter.get_total_flops())


def count_training_flops(model: nn.Module, inputs: torch.Tensor) -> FlopCount:
    """FLOPs of forward + backward (train mode; backward of the summed output, which costs the
    same matmul FLOPs as any scalar loss), per leaf module.

    The total comes from one flop_counter pass over the whole graph. The per-layer split does
    not use flop_counter's module attribution: in backward it charges a residual block's main
    branch to the block's downsample shortcut as well (seen on torchvision ResNets with torch
    2.14: per-layer sums exceed the total by 2.08 GFLOP on ResNet-18). Instead every leaf is
    replayed alone, on the meta device, with the input shape and requires_grad it saw in the
    real graph; the per-layer sum must then equal the whole-graph total, which the tests check.
    """
    model.train()
    seen: list[tuple[str, torch.Size, torch.dtype, bool]] = []
    hooks = [
        module.register_forward_hook(
            lambda _m, args, _out, name=name: seen.append(
                (name, args[0].shape, args[0].dtype, args[0].requires_grad)
            )
        )
        for name, module in leaf_modules(model).items()
    ]
    counter = FlopCounterMode(display=False)
    try:
        with counter:
            model(inputs).sum().backward()
    finally:
        for hook in hooks:
            hook.remove()

    leaves = leaf_modules(model)
    by_layer = dict.fromkeys(leaves, 0)
    replayed: dict[tuple, int] = {}  # ResNets repeat the same layer on the same shape often
    for name, shape, dtype, requires_grad in seen:
        key = (repr(leaves[name]), type(leaves[name]), shape, dtype, requires_grad)
        if key not in replayed:
            replayed[key] = _replay(leaves[name], shape, dtype, requires_grad)
        by_layer[name] += replayed[key]
    model.zero_grad(set_to_none=True)
    return _group(model, by_layer, counter.get_total_flops())


def _replay(layer: nn.Module, shape: torch.Size, dtype: torch.dtype, requires_grad: bool) -> int:
    """FLOPs of forward + backward of one layer alone on the meta device."""
    replica = _meta_copy(layer)
    x = torch.empty(shape, dtype=dtype, device="meta", requires_grad=requires_grad)
    counter = FlopCounterMode(display=False)
    with counter:
        # A non-leaf input, as in the real graph, so in-place layers (ReLU) are allowed.
        out = replica(x.clone() if requires_grad else x)
        if out.requires_grad:
            out.sum().backward()
    return counter.get_total_flops()


def _meta_copy(module: nn.Module) -> nn.Module:
    """The same layer with meta parameters, so replaying it touches no real memory."""
    replica = copy.deepcopy(module).to("meta") if _has_real_tensors(module) else module
    return replica.train(module.training)


def _has_real_tensors(module: nn.Module) -> bool:
    return any(t.device.type != "meta" for t in [*module.parameters(), *module.buffers()])
