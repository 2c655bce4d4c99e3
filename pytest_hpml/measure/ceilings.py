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


def math_mode(device_type: str, dtype: torch.dtype, backends: Any = torch.backends) -> str:
    """What besides the dtype sets a matmul's speed now: for fp32, TF32 or IEEE (CUDA's matmul
    switch, oneDNN's on a CPU, bf16 there too); for fp16 / bf16 on CUDA, whether reductions may
    run in reduced precision. "" where nothing does (int8)."""
    if dtype == torch.float32:
        if device_type == "cuda":
            switch = backends.cuda.matmul
            if not hasattr(switch, "fp32_precision"):  # torch before 2.9: the legacy flag
                return "tf32" if switch.allow_tf32 else "ieee"
        else:
            switch = getattr(getattr(backends, "mkldnn", None), "matmul", None)
        precision = getattr(switch, "fp32_precision", "none")
        if precision == "none":  # inherit the global switch, itself "none" (IEEE) by default
            precision = getattr(backends, "fp32_precision", "none")
        return "ieee" if precision == "none" else precision
    if device_type == "cuda" and dtype in (torch.float16, torch.bfloat16):
        name = "fp16" if dtype == torch.float16 else "bf16"
        reduced = getattr(backends.cuda.matmul, f"allow_{name}_reduced_precision_reduction")
        return "reduced-precision-reduction" if reduced else "full-precision-reduction"
    return ""


class Ceilings:
    def __init__(self, device: Any, profile: str, clock: Clock | None = None,
                 backends: Any = torch.backends) -> None:
        self.device = torch.device(device)
        self.profile = profile
        self._backends = backends
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
        """FLOP/s (OP/s for int8) of a square torch.matmul, 2 n^3 operations per call, in the
        math mode set now (TF32 or IEEE for fp32): one measurement per dtype and mode."""
        mode = math_mode(self.device.type, dtype, self._backends)
        key = f"matmul-{dtype}" + (f"-{mode}" if mode else "")
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
