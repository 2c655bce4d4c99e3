"""The device's measured ceilings: copy bandwidth and matmul FLOP/s per dtype.

Labs report "% of measured peak" against these rather than against datasheet numbers, which
a given board, clock and driver rarely reach. Each is measured once per process on first use.
A ceiling is the best the device showed, so it is taken from the fastest sample: the median
would fold the noise of a shared machine into the roof itself.
"""

from __future__ import annotations

from typing import Any

import torch

from pytest_hpml.measure.clocks import Clock, clock_for
from pytest_hpml.measure.timing import TimingConfig, measure

# Sizes per profile: big enough to leave the caches (CPU L3 is tens of MB, H100 L2 is 50 MB),
# small enough that quick runs stay quick.
COPY_BYTES = {"quick": 128 * 2**20, "full": 1024 * 2**20}
MATMUL_N = {"quick": {"cpu": 1024, "cuda": 4096}, "full": {"cpu": 2048, "cuda": 8192}}


class Ceilings:
    def __init__(self, device: Any, profile: str, clock: Clock | None = None) -> None:
        self.device = torch.device(device)
        self.profile = profile
        # Warm L2 on purpose: the copies are far larger than any cache, and a ceiling is the
        # best the device shows.
        self._clock = clock or clock_for(self.device, "device", cold_l2=False)
        self._cache: dict[str, float] = {}
        self._config = TimingConfig(min_samples=5, max_time=1.0 if profile == "quick" else 3.0)

    def copy_bandwidth(self) -> float:
        """B/s of a large device-to-device copy, counting read + write (STREAM copy)."""
        if "copy" not in self._cache:
            numel = COPY_BYTES[self.profile] // 4
            src = torch.ones(numel, dtype=torch.float32, device=self.device)
            dst = torch.empty_like(src)
            t = measure(dst.copy_, (src,), clock=self._clock, config=self._config)
            self._cache["copy"] = 2 * src.nbytes / t.min
            del src, dst
        return self._cache["copy"]

    def matmul_flops(self, dtype: torch.dtype = torch.float32) -> float:
        """FLOP/s (OP/s for int8) of a square torch.matmul, 2 n^3 operations per call."""
        key = f"matmul-{dtype}"
        if key not in self._cache:
            n = MATMUL_N[self.profile]["cuda" if self.device.type == "cuda" else "cpu"]
            if dtype == torch.int8:
                a = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=self.device)
                # B column-major (a transposed view): cuBLASLt's int8 kernels want that layout
                # and, with CUDA 13, refuse row-major B outright.
                b = torch.randint(-128, 128, (n, n), dtype=torch.int8, device=self.device).t()
                fn = torch._int_mm  # int8 x int8 -> int32, the tensor-core path on CUDA
            else:
                a = torch.randn(n, n, device=self.device).to(dtype)
                b = torch.randn(n, n, device=self.device).to(dtype)
                fn = torch.matmul
            t = measure(fn, (a, b), clock=self._clock, config=self._config)
            self._cache[key] = 2 * n**3 / t.min
        return self._cache[key]

    def measured(self) -> dict[str, float]:
        """What this process has measured so far (labs record the ceilings they divide by)."""
        return dict(self._cache)


_MEASURED: dict[tuple[str, str], Ceilings] = {}


def ceilings_for(device: Any, profile: str) -> Ceilings:
    """The device's measured ceilings, one set per device and profile per process, with a
    clock of their own (never a test's clock, nor its cold-L2 setting)."""
    key = (str(device), profile)
    if key not in _MEASURED:
        _MEASURED[key] = Ceilings(device, profile)
    return _MEASURED[key]
