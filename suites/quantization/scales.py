"""Symmetric int8 scales (zero point 0) for weights and activations, and (de)quantization.

Weights use the restricted range [-127, 127] so that negating a weight never saturates;
activations use the full [-128, 127]. A tensor (or channel) that is all zeros gets the defined
scale 1.0: any scale represents zero exactly, and 1.0 keeps the downstream rescale factors
finite instead of dividing by zero."""
from __future__ import annotations

from typing import Literal

import torch

WEIGHT_QMAX = 127
ACT_QMIN, ACT_QMAX = -128, 127
ZERO_TENSOR_SCALE = 1.0

Granularity = Literal["per-tensor", "per-channel"]


def _check_finite(x: torch.Tensor, what: str) -> None:
    if x.numel() == 0:
        raise ValueError(f"cannot compute a scale for an empty {what}: pass at least one value")
    if not torch.isfinite(x).all():
        raise ValueError(f"{what} contains NaN or Inf; a scale from it would be meaningless")


def scale_from_absmax(absmax: torch.Tensor, qmax: int) -> torch.Tensor:
    """absmax / qmax, with ZERO_TENSOR_SCALE where absmax is 0 (float32)."""
    absmax = absmax.to(torch.float32)
    return torch.where(absmax > 0, absmax / qmax, torch.full_like(absmax, ZERO_TENSOR_SCALE))


def weight_scale(weight: torch.Tensor, granularity: Granularity) -> torch.Tensor:
    """Scale of shape () per tensor, or (C_out,) per output channel (dim 0)."""
    _check_finite(weight, "weight")
    if granularity == "per-tensor":
        absmax = weight.abs().max()
    elif granularity == "per-channel":
        absmax = weight.abs().flatten(1).amax(dim=1)
    else:
        raise ValueError(f"granularity must be 'per-tensor' or 'per-channel', got {granularity!r}")
    return scale_from_absmax(absmax, WEIGHT_QMAX)


def _broadcast_channel(scale: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return scale.reshape(-1, *([1] * (like.dim() - 1))) if scale.dim() == 1 else scale


def quantize(x: torch.Tensor, scale: torch.Tensor | float, qmin: int, qmax: int) -> torch.Tensor:
    """round(x / scale) clamped to [qmin, qmax], as int8. A per-channel scale applies to dim 0."""
    scale = torch.as_tensor(scale, dtype=torch.float32, device=x.device)
    if (scale <= 0).any() or not torch.isfinite(scale).all():
        raise ValueError("quantization scale must be finite and > 0")
    return torch.round(x / _broadcast_channel(scale, x)).clamp(qmin, qmax).to(torch.int8)


def dequantize(q: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    scale = torch.as_tensor(scale, dtype=torch.float32, device=q.device)
    return q.to(torch.float32) * _broadcast_channel(scale, q)


def quantize_weight(weight: torch.Tensor, granularity: Granularity
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    scale = weight_scale(weight, granularity)
    return quantize(weight, scale, -WEIGHT_QMAX, WEIGHT_QMAX), scale


def fake_quantize_activation(x: torch.Tensor, scale: float) -> torch.Tensor:
    """What a layer sees when its input is stored as int8 with this scale."""
    return dequantize(quantize(x, scale, ACT_QMIN, ACT_QMAX), scale)


def quantize_bias(bias: torch.Tensor, weight_scale: torch.Tensor, input_scale: float
                  ) -> torch.Tensor:
    """int32 bias in the accumulator's scale S_w * S_in, zero point 0 (Jacob et al., eq. 10)."""
    _check_finite(bias, "bias")
    acc_scale = weight_scale.to(torch.float64) * input_scale
    q = torch.round(bias.to(torch.float64) / acc_scale)
    limit = 2 ** 31 - 1
    if (q.abs() > limit).any():
        raise ValueError("bias / (S_w * S_in) overflows int32: a weight or input scale is far "
                         "too small for this bias; recalibrate")
    return q.to(torch.int32)
