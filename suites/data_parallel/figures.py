"""The lab's figures from what the ranks recorded: plain arithmetic, no torch.distributed.

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
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


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


def gap_closed(baseline: float, large: float, remedy: float) -> float:
    """The share of the large batch's shortfall from the baseline that a remedy wins back
    (1: all of it, 0: none, negative: it made things worse)."""
    gap = baseline - large
    return (remedy - large) / gap if gap else 0.0
