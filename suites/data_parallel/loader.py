"""CIFAR-10 for one rank: its shard of every epoch (DistributedSampler), augmented a batch at a
time in the DataLoader's worker processes.

The images are held as one tensor and a batch is served in a single `__getitems__` call (the
DataLoader's batched fetch): one crop-and-flip over the whole batch instead of one PIL round trip
per image, which on a CPU would cost more than the training step it feeds. Each batch also
carries the indices of its samples, so the order a rank saw can be recorded (question 5).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from suites.common.augment import normalize_cifar10, random_crop_flip
from suites.common.data import LabData, load_cifar10
from suites.data_parallel.config import Recipe


@dataclass(frozen=True)
class DataSpec:
    """Which CIFAR-10 each rank loads for itself (plain values: cheap to send to a rank, and a
    torchrun rank on another node loads from its own disk)."""

    root: str | None = None  # torchvision's CIFAR-10 folder; None: the synthetic stand-in
    train_images: int | None = None  # None: all 50,000
    test_images: int | None = None  # None: all 10,000
    eval_split: str = "test"  # what a rank scores its model on at the end

    def __post_init__(self) -> None:
        if self.eval_split not in ("train", "test"):
            raise ValueError(f"eval_split must be 'train' or 'test', got {self.eval_split!r}")

    def train(self) -> LabData:
        return load_cifar10("train", root=self.root, limit=self.train_images)

    def evaluation(self) -> LabData:
        if self.eval_split == "train":
            return self.train()
        return load_cifar10("test", root=self.root, limit=self.test_images)


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
