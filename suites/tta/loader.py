"""The input pipeline: shuffled, augmented, normalized training batches through a DataLoader.

Each item of the dataset is a whole batch, addressed by (epoch, batch index): the permutation
of an epoch comes from (seed, epoch) and a batch's augmentation from (seed, epoch, index). So a
batch is the same whichever process makes it, and the number of DataLoader workers (a remedy of
the utilization experiment) changes how fast batches come, never which batches come. Batches
are made with whole-tensor operations (suites/common/augment.py): per-image Python transforms
would dominate an epoch on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from suites.common.augment import normalize_cifar10, random_crop_flip


def _generator(*key: int) -> torch.Generator:
    # SeedSequence mixes the key, so neighbouring (seed, epoch, index) give unrelated streams.
    return torch.Generator().manual_seed(int(np.random.SeedSequence(key).generate_state(1)[0]))


class ShuffledBatches(Dataset):
    """Batch `index` of `epoch`: images normalized (and augmented if asked), and labels.

    The last incomplete batch is dropped, as in most fast CIFAR-10 recipes, so every step sees
    the same batch size (a constant shape is also what CUDA graphs need)."""

    def __init__(self, images: torch.Tensor, labels: torch.Tensor, batch_size: int, seed: int,
                 augment: bool) -> None:
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        if not 0 < batch_size <= len(images):
            raise ValueError(f"batch size {batch_size} must be in [1, {len(images)}] (the "
                             "number of training images)")
        self.images, self.labels = images, labels
        self.batch_size, self.seed, self.augment = batch_size, seed, augment
        self._order: tuple[int, torch.Tensor] | None = None

    def __len__(self) -> int:
        return len(self.images) // self.batch_size

    def order(self, epoch: int) -> torch.Tensor:
        """The permutation of the training set for this epoch (cached: one per epoch)."""
        if self._order is None or self._order[0] != epoch:
            self._order = (epoch, torch.randperm(len(self.images),
                                                 generator=_generator(self.seed, epoch)))
        return self._order[1]

    def __getitem__(self, key: tuple[int, int]) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, index = key
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} of {len(self)}")
        rows = self.order(epoch)[index * self.batch_size:(index + 1) * self.batch_size]
        images = self.images[rows]
        if self.augment:
            images = random_crop_flip(images, _generator(self.seed, epoch, index))
        return normalize_cifar10(images), self.labels[rows]


class EpochSampler(Sampler):
    """Yields (epoch, batch index) keys. It lives in the training process, so setting `epoch`
    reaches persistent workers too (they only ever see the keys)."""

    def __init__(self, batches: int) -> None:
        self.batches = batches
        self.epoch = 0

    def __len__(self) -> int:
        return self.batches

    def __iter__(self) -> Iterator[tuple[int, int]]:
        return iter([(self.epoch, i) for i in range(self.batches)])


def make_loader(images: torch.Tensor, labels: torch.Tensor, batch_size: int, seed: int, *,
                augment: bool, workers: int = 0, pin_memory: bool = False
                ) -> tuple[DataLoader, EpochSampler]:
    """The DataLoader of a training job and the sampler whose `epoch` selects the epoch."""
    dataset = ShuffledBatches(images, labels, batch_size, seed, augment)
    sampler = EpochSampler(len(dataset))
    loader = DataLoader(dataset, batch_size=None, sampler=sampler, num_workers=workers,
                        pin_memory=pin_memory, persistent_workers=workers > 0,
                        prefetch_factor=4 if workers > 0 else None)
    return loader, sampler
