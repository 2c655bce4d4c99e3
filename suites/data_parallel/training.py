"""The training loop of one process, read top to bottom, with what each epoch measured.

One loop serves every wrapper: the plain model (one worker, the lab-2 baseline), DDP (one rank of
N) and DataParallel (one process driving N GPUs). Per step it stamps the part the lab calls
training time (host-to-device copy, forward, backward and the update; data loading excluded) and
collects the comm hook's bucket intervals; per epoch it takes the wall time (everything, loading
included) and the time spent waiting for the loader.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from suites.common.augment import normalize_cifar10
from suites.data_parallel.comm_hook import AllReduceTimer
from suites.data_parallel.config import Recipe, learning_rate
from suites.data_parallel.instruments import covered
from suites.data_parallel.wire import WireCounter


@dataclass
class EpochRecord:
    """One epoch on one rank. Times in seconds."""

    epoch: int  # 1-based
    synchronized: bool  # False: the compute-only epoch, run under DDP's no_sync
    wall: float  # the whole epoch: loading, copies, compute, communication
    loader_wait: float  # waiting for the next batch (the DataLoader's share of `wall`)
    step_times: list[float] = field(default_factory=list)  # copy + fwd + bwd + update, per step
    comm_times: list[float] = field(default_factory=list)  # per step: all-reduce in flight
    bucket_bytes: list[int] = field(default_factory=list)  # per step: gradient bytes reduced
    bucket_sizes: list[int] = field(default_factory=list)  # the last step's buckets, in order
    wire: dict[str, int] = field(default_factory=dict)  # bytes per collective in this epoch
    loss_sum: float = 0.0  # sum over this rank's samples of the training loss
    correct: int = 0  # training samples classified right (augmented, before the update)
    samples: int = 0
    last_lr: float = 0.0

    @property
    def training_time(self) -> float:
        """The lab's "training time": the steps, data loading excluded."""
        return sum(self.step_times)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_epoch(model: nn.Module, loader: Any, optimizer: torch.optim.Optimizer, recipe: Recipe,
                world_size: int, device: torch.device, clock: Any, epoch: int, first_step: int,
                timer: AllReduceTimer | None = None, wire: WireCounter | None = None,
                no_sync: Any = None) -> EpochRecord:
    """One pass over this rank's shard. ``no_sync``: DDP's context manager, entered around each
    forward and backward so that no gradient is communicated (the compute-only epoch)."""
    model.train()
    steps = len(loader)
    loss_sum = torch.zeros((), device=device)
    correct = torch.zeros((), dtype=torch.int64, device=device)
    marks, buckets = [], []
    samples = 0
    lr = recipe.lr
    if wire is not None:  # the compute-only epoch repeats an epoch's number: its own phase
        wire.phase = f"epoch {epoch}" + ("" if no_sync is None else ", no_sync")
    _synchronize(device)
    epoch_start = time.perf_counter()
    waited = 0.0
    batches = iter(loader)
    for step in range(first_step, first_step + steps):
        asked = time.perf_counter()
        images, labels, _ = next(batches)
        waited += time.perf_counter() - asked
        if timer is not None:
            timer.begin_step()
        start = clock.mark()
        images = images.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        lr = learning_rate(recipe, world_size, step, steps)
        for group in optimizer.param_groups:
            group["lr"] = lr
        optimizer.zero_grad(set_to_none=True)
        with no_sync() if no_sync is not None else contextlib.nullcontext():
            output = model(images)
            loss = F.cross_entropy(output, labels)
            loss.backward()
        optimizer.step()
        marks.append((start, clock.mark()))
        buckets.append(timer.end_step() if timer is not None else [])
        # Kept on the device: reading them here would synchronize every step.
        loss_sum += loss.detach() * labels.numel()
        correct += (output.detach().argmax(1) == labels).sum()
        samples += labels.numel()
    _synchronize(device)
    wall = time.perf_counter() - epoch_start
    clock.synchronize()
    record = EpochRecord(epoch=epoch, synchronized=no_sync is None, wall=wall, loader_wait=waited,
                         loss_sum=loss_sum.item(), correct=int(correct.item()), samples=samples,
                         last_lr=lr)
    for (start, end), step_buckets in zip(marks, buckets, strict=True):
        record.step_times.append(clock.seconds(start, end))
        record.comm_times.append(covered(
            (clock.seconds(start, b.start), clock.seconds(start, b.end)) for b in step_buckets))
        record.bucket_bytes.append(sum(b.nbytes for b in step_buckets))
    if buckets:
        record.bucket_sizes = [b.nbytes for b in sorted(buckets[-1], key=lambda b: b.index)]
    if wire is not None:
        record.wire = wire.phase_bytes(wire.phase)
    return record


@torch.no_grad()
def evaluate(model: nn.Module, images: torch.Tensor, labels: torch.Tensor,
             device: torch.device, batch_size: int = 500) -> float:
    """Test accuracy with the model's own running BatchNorm statistics (eval mode)."""
    model.eval()
    correct = 0
    for lo in range(0, labels.numel(), batch_size):
        x = normalize_cifar10(images[lo:lo + batch_size]).to(device)
        correct += int((model(x).argmax(1) == labels[lo:lo + batch_size].to(device)).sum())
    model.train()
    return correct / max(1, labels.numel())
