"""PALEO's execution-time model and the roofline bound.

PALEO (Qi et al., ICLR 2017) estimates a layer's time as FLOPs / (peak FLOP/s x PPP), where the
platform percent of peak (PPP) absorbs everything the hardware peak ignores: memory stalls,
kernel launch and framework overhead, layers that do not map onto the peak units. Measuring the
time and solving for PPP tells how far a model runs from the peak.
"""

from __future__ import annotations


def paleo_time(flops: float, peak_flops: float, ppp: float = 1.0) -> float:
    """Estimated seconds: FLOPs / (peak x PPP)."""
    if not (peak_flops > 0 and 0 < ppp <= 1):
        raise ValueError(f"need peak_flops > 0 and 0 < ppp <= 1, got {peak_flops}, {ppp}")
    return flops / (peak_flops * ppp)


def platform_percent_of_peak(flops: float, peak_flops: float, measured_time: float) -> float:
    """PPP that makes PALEO's estimate equal the measured time: (FLOPs / peak) / measured."""
    return paleo_time(flops, peak_flops) / measured_time


def attainable_flops(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """The roof: min(peak FLOP/s, arithmetic intensity x memory bandwidth)."""
    return min(peak_flops, intensity * bandwidth)


def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Arithmetic intensity (FLOP/B) where the memory roof meets the compute roof."""
    return peak_flops / bandwidth
