"""Element-wise closeness checks with messages a person can act on."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Defaults per dtype, as torch.testing.assert_close chooses them; integers are exact.
DEFAULT_TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1.3e-6, 1e-5),
    torch.float16: (1e-3, 1e-5),
    torch.bfloat16: (1.6e-2, 1e-5),
}


@dataclass
class Closeness:
    max_rel_error: float
    max_abs_error: float
    mismatched: int
    total: int
    message: str | None  # None when within tolerance


def _as_tensor(x: object) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        return x.detach()
    return torch.as_tensor(x)


def compare(actual: object, expected: object, rtol: float | None = None,
            atol: float | None = None) -> Closeness:
    """|actual - expected| <= atol + rtol * |expected| everywhere, and every value finite."""
    a, e = _as_tensor(actual), _as_tensor(expected)
    if a.shape != e.shape:
        return Closeness(float("inf"), float("inf"), a.numel(), a.numel(),
                         f"shape mismatch: actual {tuple(a.shape)}, expected {tuple(e.shape)}")
    default_rtol, default_atol = DEFAULT_TOLERANCES.get(a.dtype, (0.0, 0.0))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    a64 = a.to(device="cpu", dtype=torch.float64)
    e64 = e.to(device="cpu", dtype=torch.float64)
    total = a64.numel()
    if total == 0:
        return Closeness(0.0, 0.0, 0, 0, None)

    abs_err = (a64 - e64).abs()
    # An element whose reference is 0 has no meaningful relative error: count it as |err|.
    rel_err = abs_err / e64.abs().clamp_min(torch.finfo(torch.float64).tiny)
    rel_err = torch.where(e64 == 0, abs_err, rel_err)
    nonfinite = ~torch.isfinite(a64)
    # NaN compares false with everything, so it is caught here rather than slipping through.
    bad = nonfinite | ~(abs_err <= atol + rtol * e64.abs())
    max_rel = float(torch.where(nonfinite, torch.inf, rel_err).max())
    max_abs = float(torch.where(nonfinite, torch.inf, abs_err).max())
    mismatched = int(bad.sum())
    if not mismatched:
        return Closeness(max_rel, max_abs, 0, total, None)

    score = torch.where(bad, torch.where(nonfinite, torch.inf, abs_err), -1.0)
    flat = int(score.argmax())
    where = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), a64.shape))
    index = where if len(where) != 1 else where[0]
    kind = "non-finite values" if int(nonfinite.sum()) else "elements"
    message = (
        f"{mismatched} of {total} {kind} out of tolerance (rtol={rtol:g}, atol={atol:g}); "
        f"worst at index {index}: actual={float(a64.flatten()[flat])!r}, "
        f"expected={float(e64.flatten()[flat])!r}, abs error={float(abs_err.flatten()[flat]):.3g}; "
        f"max relative error {max_rel:.3g}"
    )
    return Closeness(max_rel, max_abs, mismatched, total, message)
