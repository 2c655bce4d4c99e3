"""A rank's data and its training loop, read top to bottom, with what each epoch measured.

The data: CIFAR-10 for one rank, its shard of every epoch (DistributedSampler), augmented a batch
at a time in the DataLoader's worker processes. The images are held as one tensor and a batch is
served in a single `__getitems__` call (the DataLoader's batched fetch): one crop-and-flip over
the whole batch instead of one PIL round trip per image, which on a CPU would cost more than the
training step it feeds. Each batch also carries the indices of its samples, so the order a rank
saw can be recorded (question 5).

The loop: one loop serves every wrapper: the plain model (one worker, the lab-2 baseline), DDP
(one rank of N) and DataParallel (one process driving N GPUs, below). Per step it stamps the part
the lab calls training time (host-to-device copy, forward, backward and the update; data loading
excluded) and collects the comm hook's bucket intervals; per epoch it takes the wall time
(everything, loading included) and the time spent waiting for the loader.

DataParallel (the handout's wrapper, compared with DDP): one process drives N GPUs. Every step it
scatters the batch across them, copies the model from GPU 0 to each (replicate), runs the
replicas in threads, gathers the outputs on GPU 0, and backward sums the gradients there; there
are no ranks and no all-reduce, and GPU 0 does more than the others. GPU only: DataParallel needs
CUDA devices.
"""

from __future__ import annotations

import contextlib
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from suites.common.augment import normalize_cifar10, random_crop_flip
from suites.common.data import LabData
from suites.common.models import resnet18_cifar
from suites.data_parallel.config import DataSpec, Recipe, learning_rate
from suites.data_parallel.instruments import AllReduceTimer, CudaEventClock, WireCounter, covered

# -- a rank's data --------------------------------------------------------------------------------

class CifarBatches(Dataset):
    """(normalized images, labels, sample indices) for a list of indices."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, augment: bool) -> None:
        self.images = images
        self.labels = labels
        self.augment = augment

    def __len__(self) -> int:
        return self.labels.numel()

    def __getitems__(self, indices: list[int]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        index = torch.as_tensor(indices, dtype=torch.int64)
        images = self.images[index]
        if self.augment:
            # The worker's own torch generator, seeded by the DataLoader from its generator:
            # a seeded run sees the same crops whichever process draws them.
            images = random_crop_flip(images)
        return normalize_cifar10(images), self.labels[index], index

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        images, labels, index = self.__getitems__([i])
        return images[0], labels[0], index[0]


def _as_is(batch: Any) -> Any:
    """`__getitems__` already returns a collated batch."""
    return batch


def _worker_start_method(workers: int) -> str | None:
    # A rank started from the launcher's forkserver inherits "forkserver" as its default start
    # method: each rank would then start a server of its own (a fresh interpreter importing
    # torch, seconds) and pickle the images to its workers. Fork, the default of a torchrun
    # rank on Linux, shares them copy-on-write.
    return "fork" if workers and sys.platform.startswith("linux") else None


def make_loader(data: LabData, recipe: Recipe, world_size: int, rank: int,
                pin_memory: bool = False, batch_size: int | None = None,
                ) -> tuple[DataLoader, DistributedSampler]:
    """This rank's loader and its sampler (call ``sampler.set_epoch`` before each epoch).

    The sampler shuffles with ``recipe.seed + epoch`` and gives rank r every world_size-th
    index of that permutation (padded so that every rank takes the same number of steps).
    """
    dataset = CifarBatches(data.images, data.labels, recipe.augment)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True,
                                 seed=recipe.seed)
    generator = torch.Generator().manual_seed(recipe.seed * 1000 + rank)
    loader = DataLoader(dataset, batch_size=batch_size or recipe.batch_per_worker,
                        sampler=sampler, num_workers=recipe.loader_workers, collate_fn=_as_is,
                        pin_memory=pin_memory, generator=generator,
                        multiprocessing_context=_worker_start_method(recipe.loader_workers),
                        # Workers forked once per run, not once per epoch: the fork of a rank
                        # holding torch is not what an epoch's time should measure.
                        persistent_workers=recipe.loader_workers > 0)
    return loader, sampler


# -- the training loop ----------------------------------------------------------------------------

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


# -- DataParallel: one process, N GPUs (GPU only) -------------------------------------------------

def dataparallel_epochs(gpus: int, data: DataSpec, recipe: Recipe) -> list[EpochRecord]:
    """Train on GPUs 0..gpus-1 with nn.DataParallel; the batch is ``batch_per_worker`` per GPU,
    as DDP's, so that both take the same steps over the same global batches."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < gpus:
        raise ValueError(f"DataParallel on {gpus} GPUs needs {gpus} CUDA devices; "
                         f"{torch.cuda.device_count()} visible")
    device = torch.device("cuda", 0)
    torch.manual_seed(recipe.seed)
    model = nn.DataParallel(resnet18_cifar(recipe.width).to(device), device_ids=list(range(gpus)))
    optimizer = torch.optim.SGD(model.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                                weight_decay=recipe.weight_decay)
    loader, sampler = make_loader(data.train(), recipe, world_size=1, rank=0, pin_memory=True,
                                  batch_size=recipe.global_batch(gpus))
    clock = CudaEventClock(device)
    epochs, step = [], 0
    for epoch in range(1, recipe.epochs + 1):
        sampler.set_epoch(epoch)
        epochs.append(train_epoch(model, loader, optimizer, recipe, gpus, device, clock, epoch,
                                  step))
        step += len(loader)
    return epochs
