"""All-reduce bandwidth as nccl-tests reports it, and the ring all-reduce time model.

An all-reduce of S bytes on N ranks that takes t seconds has

    algbw = S / t                      what the caller sees: the buffer's size over the time
    busbw = algbw x 2(N-1)/N           what each link carried: comparable with the hardware's
                                       link bandwidth, whatever N is

because the bandwidth-optimal ring all-reduce (Patarasuk and Yuan, 2009) sends and receives
2(N-1)/N x S bytes per rank: a reduce-scatter then an all-gather, each N-1 steps of S/N bytes.
Its time on links of bandwidth B with per-step latency a is

    T(S) = 2(N-1)/N x S/B + 2(N-1) x a

which is what ``ring_allreduce_time`` computes and ``fit_ring_model`` fits to a sweep.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


def bus_factor(world_size: int) -> float:
    """2(N-1)/N: the bytes each rank moves per byte all-reduced (0 for one rank)."""
    if world_size < 1:
        raise ValueError(f"world size must be >= 1, got {world_size}")
    return 2 * (world_size - 1) / world_size


def algbw(nbytes: float, seconds: float) -> float:
    """Algorithm bandwidth, B/s: the buffer's size over the all-reduce's time."""
    if not seconds > 0:
        raise ValueError(f"an all-reduce takes a positive time, got {seconds} s")
    return nbytes / seconds


def busbw(nbytes: float, seconds: float, world_size: int) -> float:
    """Bus bandwidth, B/s: algbw x 2(N-1)/N (nccl-tests' figure of merit)."""
    return algbw(nbytes, seconds) * bus_factor(world_size)


def ring_allreduce_time(nbytes: float, world_size: int, link_bandwidth: float,
                        latency: float) -> float:
    """Patarasuk and Yuan's ring: 2(N-1) steps of S/N bytes, each paying the latency once."""
    return bus_factor(world_size) * nbytes / link_bandwidth + 2 * (world_size - 1) * latency


def fit_ring_model(sizes: Sequence[float], seconds: Sequence[float],
                   world_size: int) -> tuple[float, float]:
    """(link bandwidth B/s, per-step latency s) of the ring model, least squares on a sweep.

    T = a S + b with a = 2(N-1)/(N B) and b = 2(N-1) latency; each point is weighted by 1/T so
    that the small messages (latency) count as much as the large ones (bandwidth).
    """
    if world_size < 2:
        raise ValueError("the ring model needs at least 2 ranks")
    if len(sizes) != len(seconds) or len(sizes) < 2:
        raise ValueError("need at least two (size, time) points of equal count")
    s = torch.tensor(sizes, dtype=torch.float64)
    t = torch.tensor(seconds, dtype=torch.float64)
    design = torch.stack([s, torch.ones_like(s)], dim=1) / t[:, None]
    slope, intercept = torch.linalg.lstsq(design, torch.ones_like(t)[:, None]).solution[:, 0]
    if not slope > 0:
        raise ValueError("the sweep's times do not grow with the size: no bandwidth to fit")
    return bus_factor(world_size) / slope.item(), max(0.0, intercept.item()) / (
        2 * (world_size - 1))


def sweep_sizes(smallest: int, largest: int) -> list[int]:
    """Message sizes from ``smallest`` to ``largest`` bytes, doubling (as nccl-tests -f 2)."""
    if not 0 < smallest <= largest:
        raise ValueError(f"need 0 < smallest <= largest bytes, got {smallest} and {largest}")
    sizes = [smallest]
    while sizes[-1] * 2 <= largest:
        sizes.append(sizes[-1] * 2)
    return sizes
