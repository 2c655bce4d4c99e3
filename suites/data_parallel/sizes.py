"""The lab at each size profile: the published experiment (full) and what quick scales down so
that each test takes seconds on 2 CPU cores.

quick keeps the code, the recipe, the questions and the ratios between batch sizes, and shrinks
the work: ResNet-18 at width 8 (stage widths 8-16-32-64: 176,402 parameters instead of
11,173,962), a few hundred synthetic images per epoch, one thread per worker, an all-reduce sweep
up to 16 MB, and a CPU memory budget per worker in place of a GPU's memory.
"""

from __future__ import annotations

from dataclasses import dataclass

from suites.data_parallel.loader import DataSpec

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

