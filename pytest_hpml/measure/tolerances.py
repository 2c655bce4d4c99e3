"""Element-wise closeness checks with messages a person can act on."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

# Defaults per dtype, as torch.testing.assert_close chooses them; integers are exact.
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
    torch.complex128: (1e-7, 1e-7),
    torch.complex64: (1.3e-6, 1e-5),
}


@dataclass
class Closeness:
    max_rel_error: float
    max_abs_error: float
    mismatched: int
    total: int
    message: str | None  # None when within tolerance
    bounds: str = ""  # "rtol=..., atol=..." as applied


def _as_tensor(x: object) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    return torch.as_tensor(x)


def _exact_kind(t: torch.Tensor) -> bool:
    return not (t.dtype.is_floating_point or t.dtype.is_complex)


def _errors(a: torch.Tensor, e: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(|a - e|, |e|, where a or e is not finite) in float64 on the CPU, exact where it matters:
    integers are subtracted in int64 (2**62 + 1 and 2**62 are equal in float64), complex
    numbers by their modulus (dropping the imaginary part would pass 1+1j against 1-1j)."""
    a, e = a.cpu(), e.cpu()
    if _exact_kind(a) and _exact_kind(e):
        diff = (a.to(torch.int64) - e.to(torch.int64)).abs()
        return diff.to(torch.float64), e.to(torch.int64).abs().to(torch.float64), \
            torch.zeros_like(diff, dtype=torch.bool)
    if a.dtype.is_complex or e.dtype.is_complex:
        a128, e128 = a.to(torch.complex128), e.to(torch.complex128)
        return (a128 - e128).abs(), e128.abs(), ~(torch.isfinite(a128) & torch.isfinite(e128))
    # An infinite reference makes the bound infinite (inf <= atol + rtol * inf): a finite
    # value would pass against it, so an infinity on either side is a mismatch.
    a64, e64 = a.to(torch.float64), e.to(torch.float64)
    return (a64 - e64).abs(), e64.abs(), ~(torch.isfinite(a64) & torch.isfinite(e64))


def compare(actual: object, expected: object, rtol: float | None = None,
            atol: float | None = None) -> Closeness:
    """|actual - expected| <= atol + rtol * |expected| everywhere, and every value of both
    finite."""
    a, e = _as_tensor(actual), _as_tensor(expected)
    for label, value in (("rtol", rtol), ("atol", atol)):
        if value is not None and not (value >= 0):  # NaN too
            raise ValueError(f"check_close: {label} must be >= 0, got {value!r}")
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(a.dtype, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    bounds = f"rtol={rtol:g}, atol={atol:g}"
    if a.shape != e.shape:
        return Closeness(math.inf, math.inf, a.numel(), a.numel(),
                         f"shape mismatch: actual {tuple(a.shape)}, expected {tuple(e.shape)}",
                         bounds)
    total = a.numel()
    if total == 0:
        return Closeness(0.0, 0.0, 0, 0, None, bounds)

    abs_err, magnitude, nonfinite = _errors(a, e)
    # An element whose reference is 0 has no meaningful relative error: count it as |err|.
    rel_err = abs_err / magnitude.clamp_min(torch.finfo(torch.float64).tiny)
    rel_err = torch.where(magnitude == 0, abs_err, rel_err)
    # NaN compares false with everything, so it is caught here rather than slipping through.
    bad = nonfinite | ~(abs_err <= atol + rtol * magnitude)
    max_rel = float(torch.where(nonfinite, torch.inf, rel_err).max())
    max_abs = float(torch.where(nonfinite, torch.inf, abs_err).max())
    mismatched = int(bad.sum())
    if not mismatched:
        return Closeness(max_rel, max_abs, 0, total, None, bounds)

    score = torch.where(bad, torch.where(nonfinite, torch.inf, abs_err), -1.0)
    flat = int(score.argmax())
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a.shape))
    index = where if len(where) != 1 else where[0]
    kind = "non-finite values" if int(nonfinite.sum()) else "elements"
    message = (
        f"{mismatched} of {total} {kind} out of tolerance ({bounds}); "
        f"worst at index {index}: actual={a.flatten()[flat].item()!r}, "
        f"expected={e.flatten()[flat].item()!r}, abs error={float(abs_err.flatten()[flat]):.3g}; "
        f"max relative error {max_rel:.3g}"
    )
    return Closeness(max_rel, max_abs, mismatched, total, message, bounds)
