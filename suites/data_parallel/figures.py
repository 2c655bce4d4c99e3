"""The lab's figures from what the ranks recorded, plain arithmetic with no torch.distributed;
the ring all-reduce model; and the published figures shown beside them.

Across ranks: a step takes as long as its slowest rank (the all-reduce holds the others), so
training time is the sum over steps of the slowest rank's step; the per-rank epoch times are kept
so that imbalance shows. Communication is the opposite case: a rank that reaches the all-reduce
early waits there for the last one, so the rank that measured the least all-reduce time per step
is the one that waited least; its figure is the communication time.

Compute vs communication (question 3.1), per epoch, from a synchronized epoch and the same steps
run again under no_sync:

    compute        the steps without any gradient communication (no_sync)
    communication  time some gradient all-reduce was in flight (the comm hook's intervals)
    exposed        what communication added to the step: synchronized - no_sync steps
    overlapped     communication hidden behind backward: communication - exposed

All-reduce bandwidth (question 3.2) as nccl-tests reports it. An all-reduce of S bytes on N ranks
that takes t seconds has

    algbw = S / t                      what the caller sees: the buffer's size over the time
    busbw = algbw x 2(N-1)/N           what each link carried: comparable with the hardware's
                                       link bandwidth, whatever N is

because the bandwidth-optimal ring all-reduce (Patarasuk and Yuan, 2009) sends and receives
2(N-1)/N x S bytes per rank: a reduce-scatter then an all-gather, each N-1 steps of S/N bytes.
Its time on links of bandwidth B with per-step latency a is

    T(S) = 2(N-1)/N x S/B + 2(N-1) x a

which is what ``ring_allreduce_time`` computes and ``fit_ring_model`` fits to a sweep.

The figures of seed report 001 (a student's answers to this lab, GPUs not named) are shown
beside the measured ones as published references only, never instead of them. They also show
what the lab's measurements are meant to fix: the report's "communication" time was the data
loader's, its bandwidth divided the size of CIFAR-10 (0.1718 GB) by that time instead of the
bytes all-reduced, and its speedups were taken across batch sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

# -- across ranks ---------------------------------------------------------------------------------

def _epochs(results: Sequence[Any], epoch: int, synchronized: bool = True) -> list[Any]:
    return [r.epoch(epoch, synchronized) for r in results]


def slowest_steps(results: Sequence[Any], epoch: int, synchronized: bool = True) -> list[float]:
    """Per step, the slowest rank's time (ranks take the same number of steps: the
    DistributedSampler pads the shards to equal length)."""
    per_rank = [e.step_times for e in _epochs(results, epoch, synchronized)]
    if len({len(steps) for steps in per_rank}) != 1:
        raise ValueError(f"ranks took different numbers of steps: {[len(s) for s in per_rank]}")
    return [max(times) for times in zip(*per_rank, strict=True)]


def training_time(results: Sequence[Any], epoch: int, synchronized: bool = True) -> float:
    """The lab's training time of an epoch: the steps, data loading excluded."""
    return sum(slowest_steps(results, epoch, synchronized))


def rank_epoch_times(results: Sequence[Any], epoch: int) -> list[float]:
    """Each rank's whole epoch (loading included), in rank order."""
    return [e.wall for e in _epochs(results, epoch)]


def imbalance(times: Sequence[float]) -> float:
    """(slowest - fastest) / slowest: the share of the slowest rank's time the fastest idles."""
    slowest = max(times)
    return (slowest - min(times)) / slowest if slowest > 0 else 0.0


def communication_steps(results: Sequence[Any], epoch: int) -> list[float]:
    """Per step, the least all-reduce time any rank measured (the rank that waited least)."""
    per_rank = [e.comm_times for e in _epochs(results, epoch)]
    return [min(times) for times in zip(*per_rank, strict=True)]


def gradient_bytes_per_step(results: Sequence[Any], epoch: int) -> int:
    """Bytes all-reduced per step; the same on every rank and step, or the run is wrong."""
    seen = {b for e in _epochs(results, epoch) for b in e.bucket_bytes}
    if len(seen) != 1:
        raise ValueError(f"ranks or steps all-reduced different byte counts: {sorted(seen)}")
    return seen.pop()


@dataclass(frozen=True)
class ComputeCommunication:
    steps: int
    synchronized: float  # s per epoch: the steps with gradient all-reduce
    compute: float  # s per epoch under no_sync
    communication: float  # s per epoch with an all-reduce in flight
    exposed: float  # s per epoch that communication added to the steps
    overlapped: float  # s per epoch of communication hidden behind compute

    @property
    def overlapped_share(self) -> float:
        return self.overlapped / self.communication if self.communication > 0 else 0.0


def compute_vs_communication(results: Sequence[Any], epoch: int) -> ComputeCommunication:
    synchronized = training_time(results, epoch, synchronized=True)
    compute = training_time(results, epoch, synchronized=False)
    communication = sum(communication_steps(results, epoch))
    # Timings on a shared machine are noisy: a no_sync epoch may come out slower than the
    # synchronized one. Nothing communicated is then exposed, not a negative amount.
    exposed = max(0.0, synchronized - compute)
    return ComputeCommunication(
        steps=len(slowest_steps(results, epoch)), synchronized=synchronized, compute=compute,
        communication=communication, exposed=exposed,
        overlapped=max(0.0, communication - exposed))


def loss_and_accuracy(results: Sequence[Any], epoch: int) -> tuple[float, float]:
    """The epoch's average training loss and accuracy over every rank's samples."""
    epochs = _epochs(results, epoch)
    samples = sum(e.samples for e in epochs)
    return (sum(e.loss_sum for e in epochs) / samples, sum(e.correct for e in epochs) / samples)


def batchnorm_drift(results: Sequence[Any]) -> float:
    """How far the ranks' BatchNorm running statistics are apart: over layers and ranks, the
    largest ||stats_rank - stats_0|| / ||stats_0|| (running mean and variance together)."""
    reference = results[0].batchnorm_statistics
    worst = 0.0
    for result in results[1:]:
        for name, stats in result.batchnorm_statistics.items():
            base = reference[name]
            worst = max(worst, float((stats - base).norm() / base.norm()))
    return worst


def speedup(one_worker: float, n_workers: float) -> float:
    return one_worker / n_workers


def efficiency(speedup_value: float, workers: int) -> float:
    """Speedup per worker: 1 is perfect scaling."""
    return speedup_value / workers


def scaling_efficiency(one_node: float, n_nodes: float, nodes: int) -> float:
    """Throughput on N nodes over N times the throughput on one (weak scaling: the same batch
    per worker); 1 is perfect scaling."""
    return n_nodes / (nodes * one_node)


def gap_closed(baseline: float, large: float, remedy: float) -> float:
    """The share of the large batch's shortfall from the baseline that a remedy wins back
    (1: all of it, 0: none, negative: it made things worse)."""
    gap = baseline - large
    return (remedy - large) / gap if gap else 0.0


# -- all-reduce bandwidth and the ring model ------------------------------------------------------

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


# -- published: seed report 001, shown as references only -----------------------------------------

PUBLISHED_SOURCE = "seed report 001 (student's answers to this lab; GPUs not named)"

#: Epoch time in seconds (its tables 1-3: every training component), [batch per GPU][GPUs].
PUBLISHED_EPOCH_TIME = {
    32: {1: 48.61245506070554, 2: 30.818510502576828, 4: 30.8219216464595},
    128: {1: 27.22366295568645, 2: 20.923493693244424, 4: 19.878172473981977},
    512: {1: 25.94455107487738, 2: 15.664426802657545, 4: 15.1269},
}

#: (compute s, "communication" s) per epoch (its tables 4-6), [batch per GPU][GPUs].
PUBLISHED_COMPUTE_COMMUNICATION = {
    32: {2: (17.719614028930664, 0.14946778118610382), 4: (18.085159301757812,
                                                            0.20533965528011322)},
    128: {2: (4.26522249438477, 0.049557614311409), 4: (4.496433734893799, 0.05234416574239731)},
    512: {2: (1.30768883228302, 0.034110888838768005), 4: (1.285510540008545,
                                                           0.03125176951289177)},
}
PUBLISHED_COMMUNICATION_NOTE = ("published 'communication' is the time the data loader took, "
                                "not an all-reduce (seed report 001, section 3.1)")

#: "Bandwidth utilization" in B/s (its table 7: 0.1718 GB of data set / communication time).
PUBLISHED_BANDWIDTH = {
    2: {32: 1.19089210121e9, 128: 3.59177903281e9, 512: 5.21827504529e9},
    4: {32: 0.86685642749e9, 128: 3.40057000576e9, 512: 5.69567748561e9},
}
PUBLISHED_BANDWIDTH_NOTE = ("published bandwidth divides the size of CIFAR-10 (0.1718 GB) by "
                            "the loader time, not the bytes all-reduced by the all-reduce time")

#: 5th-epoch training loss and accuracy (its section 4.1), and the GPUs each ran on: the
#: largest batch on 4, lab 2's batch 128 on one (the lab's question 4.1).
PUBLISHED_LARGE_BATCH = {"large batch on 4 GPUs": (4, 0.6241, 0.7834),
                         "batch 128 (lab 2)": (1, 0.7153, 0.7536)}
