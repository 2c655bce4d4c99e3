"""The lab's sizes: K million elements, the sweeps over K, and STREAM's byte count."""

from __future__ import annotations

#: K (million elements) of the GPU experiments, per size profile.
GPU_SWEEP = dict(quick=[0.01, 0.1, 1], full=[1, 5, 10, 50, 100])
FLOAT32_BYTES = 4
#: STREAM's count for c = a + b: two arrays read, one written, 4 bytes per float32.
STREAM_ARRAYS = 3


def stream_bytes(n_elements: int) -> int:
    """Bytes a vector add must move, counted STREAM's way (no write-allocate traffic)."""
    return STREAM_ARRAYS * FLOAT32_BYTES * n_elements


def elements(k_million: float) -> int:
    """Array length for K million elements (K may be fractional in the quick profile)."""
    n = round(k_million * 1_000_000)
    if n < 1:
        raise ValueError(f"K = {k_million} million is less than one element: use K >= 1e-6")
    return n
