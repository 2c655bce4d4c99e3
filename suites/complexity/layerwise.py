"""Layer-wise timing of a forward pass, as the per-layer tables of Lu et al. (and PALEO's) were
made, to set beside the measured time of the whole network (shared/seeds 003, problem 1.3).

A forward pre-hook and a forward hook on every leaf module (convolution, BatchNorm, ReLU,
pooling, linear ...) stamp the clock around each call. On a GPU each stamp first synchronizes
the device, as layer-wise profiling must (otherwise a layer's time is the time to queue its
kernels): that is the measurement overhead which makes the sum of layer-wise times exceed the
measured forward pass there. What runs between leaf modules (a ResNet's residual additions,
GoogLeNet's concatenations, a flatten) belongs to no layer: on a CPU it is why the sum falls
short of the forward pass timed with the clocks in place.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from suites.complexity.flops import leaf_modules


@dataclass
class LayerwisePass:
    """One forward pass timed layer by layer: each leaf call's seconds, in call order (a module
    called twice, as a ResNet block's ReLU, appears twice), and the whole pass with the clocks
    in place."""

    calls: list[tuple[str, str, float]] = field(default_factory=list)  # (layer, type, seconds)
    with_clocks: float = 0.0

    @property
    def layer_sum(self) -> float:
        return sum(seconds for *_, seconds in self.calls)


def _synchronizer(device: torch.device) -> Callable[[], None]:
    if device.type == "cuda":  # pragma: no cover - GPU only, never run on the CPU-only machine
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


@contextlib.contextmanager
def layer_clocks(net: nn.Module, into: list[tuple[str, str, float]],
                 synchronize: Callable[[], None],
                 now: Callable[[], float] = time.perf_counter) -> Iterator[None]:
    """Hooks on every leaf module of `net` that append (layer, type, seconds) to `into` for each
    call while the block runs; removed after it."""
    started: list[float] = []
    handles = []

    def before(module: nn.Module, args: object) -> None:
        synchronize()
        started.append(now())

    def after(name: str, kind: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: object, output: object) -> None:
            synchronize()
            into.append((name, kind, now() - started.pop()))
        return hook

    for name, module in leaf_modules(net).items():
        handles.append(module.register_forward_pre_hook(before))
        handles.append(module.register_forward_hook(after(name, type(module).__name__)))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def time_layerwise(net: nn.Module, images: torch.Tensor, passes: int) -> list[LayerwisePass]:
    """`passes` inference forward passes timed layer by layer, after one untimed warm-up."""
    synchronize = _synchronizer(images.device)
    timed = []
    with torch.no_grad():
        for i in range(passes + 1):
            one = LayerwisePass()
            with layer_clocks(net, one.calls, synchronize):
                synchronize()
                start = time.perf_counter()
                net(images)
                synchronize()
                one.with_clocks = time.perf_counter() - start
            if i:
                timed.append(one)
    return timed


def median_by_layer_type(passes: list[LayerwisePass]) -> dict[str, float]:
    """Per layer type, the median over the passes of that type's summed seconds."""
    kinds = dict.fromkeys(kind for p in passes for _, kind, _ in p.calls)
    return {kind: statistics.median(sum(s for _, k, s in p.calls if k == kind) for p in passes)
            for kind in kinds}
