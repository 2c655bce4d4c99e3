"""The lab's configuration as plain values: the training recipe, the data each rank loads, and
the size profiles.

The recipe is lab 2's (SGD with momentum 0.9, weight decay 5e-4, lr 0.1 at batch 128) with the
knobs the lab's questions turn. The learning rate follows Goyal et al. (2017), "Accurate, large
minibatch SGD", when asked: linear scaling multiplies it by k = global batch / the batch the rate
was set for (128 in lab 2), and gradual warm-up starts at the unscaled rate and adds a constant
amount every step until it reaches the scaled one at the end of the warm-up epochs.

The profiles: the published experiment (full) and what quick scales down so that each test
takes seconds on 2 CPU cores. quick keeps the code, the recipe, the questions and the ratios
between batch sizes, and shrinks the work: ResNet-18 at width 8 (stage widths 8-16-32-64:
176,402 parameters instead of 11,173,962), a few hundred synthetic images per epoch, one thread
per worker, an all-reduce sweep up to 16 MB, and a CPU memory budget per worker in place of a
GPU's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from suites.common.data import LabData, load_cifar10

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


# -- the data a rank loads ------------------------------------------------------------------------

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


# -- the size profiles ----------------------------------------------------------------------------

KB, MB = 2**10, 2**20
MEGABYTE = 10**6


@dataclass(frozen=True)
class Scale:
    """Question numbers are the handout's (shared/seeds 004, part A)."""

    width: int  # ResNet-18 first-stage channels (64: the published model)
    train_images: int | None  # per epoch (None: all 50,000)
    test_images: int | None
    batch_sweep_images: int | None  # Q1's training set
    batches: tuple[int, ...]  # Q1: x4 from 32 until memory runs out
    memory_budget: int | None  # bytes per CPU worker standing in for a GPU's memory
    per_worker_batches: tuple[int, ...]  # Q2, Q3.1, Q3.2
    workers: tuple[int, ...]  # Q2, Q3.1, Q3.2 (Q4, Q6, Q7 always take 4)
    large_batch_images: int | None  # Q4's training set (Q6 and Q7 read Q4's runs)
    large_batch_eval_split: str  # what Q7 scores each worker's model on
    baseline_batch: int  # Q4: lab 2's batch on one worker ...
    baseline_lr: float  # ... and its learning rate
    large_batch: int  # Q4: the largest per-worker batch that fits (Q1)
    large_batch_epochs: int
    large_batch_augment: bool
    warmup_epochs: int
    sweep_bytes: tuple[int, int]  # Q3.2: smallest and largest all_reduce
    scaled_down: str  # what a reader of every table must know
    run_timeout: float  # seconds a launched run may take before every rank is ended
    # Q9: nodes x ranks per node emulated on one machine when no launcher gives nodes (CPU
    # ranks; None: the question needs a job across nodes), its sweep, its batch per worker.
    emulated_nodes: tuple[int, int] | None = None
    node_sweep_bytes: tuple[int, int] = (8 * 2**10, 256 * 2**20)
    node_batch: int = REFERENCE_BATCH
    memory_note: str = ""
    large_batch_note: str = ""


SCALES = {
    "quick": Scale(
        # Q1 needs 512 images for its batch of 512; elsewhere 2 workers x 128 is one step.
        width=8, train_images=256, test_images=256, batch_sweep_images=512,
        batches=(32, 128, 512), memory_budget=320 * MEGABYTE,
        # 4 CPU workers on 2 cores only where a question needs them (Q4, Q6, Q7).
        per_worker_batches=(32, 128), workers=(1, 2),
        # 5 epochs of 192 images must take enough steps to learn something: the baseline is
        # batch 16 at lab 2's rate scaled by the linear rule (0.1 x 16 / 128), the large batch
        # 4 workers x 16 (k = 4, not 16), without augmentation (which the stand-in data cannot
        # afford in 60 steps). Its test images are not learned from 192 training images
        # (chance accuracy), so Q7 scores the workers on the training images, in eval mode,
        # where their BatchNorm statistics make the difference.
        large_batch_images=192, large_batch_eval_split="train", baseline_batch=16,
        baseline_lr=0.0125, large_batch=16, large_batch_epochs=5, large_batch_augment=False,
        warmup_epochs=2, sweep_bytes=(8 * KB, 16 * MB), run_timeout=300.0,
        emulated_nodes=(2, 2), node_sweep_bytes=(8 * KB, 4 * MB), node_batch=32,
        scaled_down=("quick profile: ResNet-18 at width 8 (176,402 parameters, not 11,173,962), "
                     "a few hundred synthetic images (column data), 1 thread per CPU worker"),
        memory_note=("memory_budget: each CPU worker may allocate 320 MB (RLIMIT_DATA), in "
                     "place of a GPU's memory"),
        large_batch_note=("quick large-batch runs: 192 images, baseline batch 16 at lr 0.0125 "
                          "(0.1 x 16 / 128), large batch 4 workers x 16 (k = 4), no "
                          "augmentation, workers scored on the training images")),
    "full": Scale(
        width=64, train_images=None, test_images=None, batch_sweep_images=None,
        batches=(32, 128, 512, 2048, 8192, 32768), memory_budget=None,
        per_worker_batches=(32, 128, 512), workers=(1, 2, 4),
        large_batch_images=None, large_batch_eval_split="test", baseline_batch=128,
        baseline_lr=0.1, large_batch=512, large_batch_epochs=5, large_batch_augment=True,
        warmup_epochs=2, sweep_bytes=(8 * KB, 256 * MB), run_timeout=3600.0,
        scaled_down=""),
}


def scale_for(profile: str) -> Scale:
    return SCALES[profile]


def data_for(profile: str, root: object = None, train_images: int | None = None,
             eval_split: str = "test") -> DataSpec:
    """The data of the profile's runs; ``train_images`` overrides the training set's size."""
    scale = SCALES[profile]
    return DataSpec(root=None if root is None else str(root),
                    train_images=train_images or scale.train_images,
                    test_images=scale.test_images, eval_split=eval_split)
