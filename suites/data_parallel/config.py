"""The training recipe (lab 2's: SGD with momentum 0.9, weight decay 5e-4, lr 0.1 at batch 128)
and the knobs the lab's questions turn, as plain values.

The learning rate follows Goyal et al. (2017), "Accurate, large minibatch SGD", when asked:
linear scaling multiplies it by k = global batch / the batch the rate was set for (128 in lab
2), and gradual warm-up starts at the unscaled rate and adds a constant amount every step until
it reaches the scaled one at the end of the warm-up epochs.
"""

from __future__ import annotations

from dataclasses import dataclass

#: lab 2's batch size and the learning rate that goes with it.
REFERENCE_BATCH = 128
REFERENCE_LR = 0.1


@dataclass(frozen=True)
class Recipe:
    batch_per_worker: int = REFERENCE_BATCH
    epochs: int = 2
    width: int = 64  # ResNet-18 first-stage channels; 64 is the published model
    lr: float = REFERENCE_LR  # the rate for a global batch of lr_batch; see learning_rate()
    lr_batch: int = REFERENCE_BATCH
    momentum: float = 0.9
    weight_decay: float = 5e-4
    linear_scaling: bool = False  # Goyal et al.: lr x (global batch / lr_batch)
    warmup_epochs: int = 0  # Goyal et al.: ramp from lr to the scaled lr over these epochs
    loader_workers: int = 2  # the lab's "2 num workers IO processes"
    augment: bool = True  # random crop + horizontal flip
    set_epoch: bool = True  # DistributedSampler.set_epoch(epoch) before each epoch
    broadcast_buffers: bool = True  # DDP sends rank 0's buffers (BN statistics) every forward
    sync_batchnorm: bool = False  # BatchNorm statistics over the global batch (CUDA only)
    compute_only_epoch: bool = False  # one more epoch under no_sync: no gradient all-reduce
    evaluate: bool = False  # each rank scores its own model at the end (DataSpec.eval_split)
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("batch_per_worker", "epochs", "width", "lr_batch"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        for name in ("warmup_epochs", "loader_workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"lr (the learning rate) must be positive, got {self.lr!r}")
        if not 0 <= self.momentum < 1 or self.weight_decay < 0:
            raise ValueError(f"momentum must be in [0, 1) and weight decay >= 0, got "
                             f"{self.momentum!r} and {self.weight_decay!r}")

    def global_batch(self, world_size: int) -> int:
        return self.batch_per_worker * world_size

    def peak_lr(self, world_size: int) -> float:
        """The rate after warm-up: scaled by k = global batch / lr_batch under linear scaling."""
        if not self.linear_scaling:
            return self.lr
        return self.lr * self.global_batch(world_size) / self.lr_batch


def learning_rate(recipe: Recipe, world_size: int, step: int, steps_per_epoch: int) -> float:
    """The rate of optimizer step ``step`` (0-based, counted over all epochs)."""
    peak = recipe.peak_lr(world_size)
    warmup_steps = recipe.warmup_epochs * steps_per_epoch
    if step >= warmup_steps:
        return peak
    # Goyal et al. section 2.2: start from the small-batch rate, equal increments per step.
    return recipe.lr + (peak - recipe.lr) * step / warmup_steps


def split_global_batch(global_batch: int, world_size: int) -> int:
    """The per-worker batch of a global batch split across ``world_size`` workers (strong
    scaling); refused before any rank starts when it cannot be split evenly."""
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world size must be a positive integer, got {world_size!r}")
    if global_batch < world_size:
        raise ValueError(f"global batch {global_batch} is smaller than the world size "
                         f"{world_size}: each of the {world_size} workers needs at least one "
                         f"sample per step; use a batch of at least {world_size}")
    if global_batch % world_size:
        raise ValueError(f"global batch {global_batch} does not split evenly across world size "
                         f"{world_size}; use a multiple of {world_size}")
    return global_batch // world_size
