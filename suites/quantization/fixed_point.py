"""Fixed-point rescaling as in gemmlowp / Jacob et al. (2018), section 2.2: the real factor
M = S_w * S_in / S_out is stored as an int32 M0 in [2^30, 2^31) and a shift, so that
M = M0 * 2^-(31 + shift), and applied to the int32 accumulator with integer arithmetic only.

Rounding: one rounding right shift of the int64 product acc * M0 by (31 + shift), rounding
half up (add 2^(s-1), arithmetic shift). The Triton epilogue in int8_gemm.py does exactly this,
so the two agree bit for bit."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

M0_BITS = 31  # M0 has 31 significant bits: [2^30, 2^31)


def quantize_multiplier(real_multiplier: float) -> tuple[int, int]:
    """M -> (M0, shift) with M == M0 * 2^-(31 + shift) up to M0's rounding (rel. error < 2^-30).

    shift >= 0 for the usual M < 1 (a right shift); the total right shift 31 + shift must lie
    in [1, 62] so the int64 product and its rounding term cannot overflow."""
    if not math.isfinite(real_multiplier) or real_multiplier <= 0:
        raise ValueError(f"rescale factor must be finite and > 0, got {real_multiplier}: "
                         "check that no scale is 0, negative or NaN")
    mantissa, exponent = math.frexp(real_multiplier)  # M = mantissa * 2^exponent, [0.5, 1)
    m0 = round(mantissa * (1 << M0_BITS))
    if m0 == 1 << M0_BITS:  # the mantissa rounded up to 1.0
        m0 //= 2
        exponent += 1
    shift = -exponent
    if not 1 <= M0_BITS + shift <= 62:
        raise ValueError(f"rescale factor {real_multiplier:g} is outside [2^-32, 2^30): the scales "
                         "of this layer are inconsistent (S_w * S_in / S_out)")
    return m0, shift


@dataclass(frozen=True)
class FixedPointMultiplier:
    """Per-output-channel M0 (int32) and shift (int32), shape (N,)."""

    m0: torch.Tensor
    shift: torch.Tensor

    @classmethod
    def from_real(cls, real: torch.Tensor | float, channels: int | None = None
                  ) -> FixedPointMultiplier:
        values = torch.as_tensor(real, dtype=torch.float64).flatten()
        if channels is not None and values.numel() == 1:
            values = values.expand(channels)
        pairs = [quantize_multiplier(float(v)) for v in values]
        return cls(m0=torch.tensor([p[0] for p in pairs], dtype=torch.int32),
                   shift=torch.tensor([p[1] for p in pairs], dtype=torch.int32))

    def real(self) -> torch.Tensor:
        """The represented factors, float64 (for error checks)."""
        return self.m0.double() * torch.pow(2.0, -(M0_BITS + self.shift.double()))

    def to(self, device: torch.device | str) -> FixedPointMultiplier:
        return FixedPointMultiplier(self.m0.to(device), self.shift.to(device))

    def nbytes(self) -> int:
        return self.m0.numel() * 4 + self.shift.numel() * 4


def rounding_right_shift(x: torch.Tensor, total_shift: torch.Tensor) -> torch.Tensor:
    """round(x / 2^s), halves rounded up; int64 in, int64 out, s >= 1."""
    total_shift = total_shift.to(torch.int64)
    return (x + (torch.ones_like(total_shift) << (total_shift - 1))) >> total_shift


def requantize(acc: torch.Tensor, multiplier: FixedPointMultiplier, zero_point: int = 0,
               qmin: int = -128, qmax: int = 127) -> torch.Tensor:
    """int32 accumulator (M, N) -> int8: acc * M (per column), + zero point, clamped.

    ReLU is folded in by qmin = zero_point (here 0): the clamp is the activation."""
    if acc.dtype != torch.int32:
        raise TypeError(f"requantize expects an int32 accumulator, got {acc.dtype}")
    product = acc.to(torch.int64) * multiplier.m0.to(acc.device, torch.int64)
    scaled = rounding_right_shift(product, M0_BITS + multiplier.shift.to(acc.device, torch.int64))
    return (scaled + zero_point).clamp(qmin, qmax).to(torch.int8)
