"""Activation profiling on calibration batches (step c) and activation scales from it (step d):
the maximum |x| seen, or a high percentile of |x| that ignores rare outliers."""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

from suites.quantization.cnn import LAYERS, CifarCNN
from suites.quantization.scales import ACT_QMAX, scale_from_absmax


@dataclass(frozen=True)
class RangeStats:
    """Range statistics of one tensor, as the lab's histograms annotate them."""

    min: float
    max: float
    mean: float
    std: float
    numel: int

    @property
    def three_sigma(self) -> tuple[float, float]:
        return (self.mean - 3 * self.std, self.mean + 3 * self.std)

    @classmethod
    def of(cls, x: torch.Tensor) -> RangeStats:
        if x.numel() == 0:
            raise ValueError("range statistics of an empty tensor are undefined")
        x = x.detach().to(torch.float64).flatten()
        return cls(min=x.min().item(), max=x.max().item(), mean=x.mean().item(),
                   std=x.std(unbiased=False).item(), numel=x.numel())


@torch.no_grad()
def profile_activations(model: CifarCNN, batches: Iterable[torch.Tensor]
                        ) -> dict[str, torch.Tensor]:
    """Every value each layer received as input over the calibration batches, flattened."""
    seen: dict[str, list[torch.Tensor]] = {name: [] for name in LAYERS}

    def record(name: str, x: torch.Tensor) -> torch.Tensor:
        seen[name].append(x.detach().flatten().cpu())
        return x

    n_batches = 0
    for batch in batches:
        if len(batch) == 0:
            continue
        model(batch, input_hook=record)
        n_batches += 1
    if n_batches == 0:
        raise ValueError("the calibration set is empty: activation scales need at least one "
                         "batch of representative inputs (e.g. a few hundred training images)")
    return {name: torch.cat(values) for name, values in seen.items()}


def absmax_percentile(values: torch.Tensor, percentile: float) -> torch.Tensor:
    """The given percentile of |values| (nearest rank), exact for any size."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    magnitudes = values.abs().flatten()
    rank = max(1, min(magnitudes.numel(), round(percentile / 100 * magnitudes.numel())))
    return magnitudes.kthvalue(rank).values


def activation_scales(profile: dict[str, torch.Tensor], method: str = "max",
                      percentile: float = 99.99) -> dict[str, float]:
    """Per-tensor int8 scale of each layer's input: max |x| / 127 or percentile |x| / 127."""
    scales = {}
    for name, values in profile.items():
        if values.numel() == 0:
            raise ValueError(f"no calibration values were recorded for layer {name}")
        if not torch.isfinite(values).all():
            raise ValueError(f"calibration inputs of layer {name} contain NaN or Inf")
        if method == "max":
            bound = values.abs().max()
        elif method == "percentile":
            bound = absmax_percentile(values, percentile)
        else:
            raise ValueError(f"calibration method must be 'max' or 'percentile', got {method!r}")
        scales[name] = scale_from_absmax(bound, ACT_QMAX).item()
    return scales
