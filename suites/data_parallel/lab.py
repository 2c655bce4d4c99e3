"""The lab as the tests use it: one size profile on one device type, its training runs started
through the launcher and kept for the rest of the process, and the columns every table shares.

``launch`` runs ranks through the launcher and turns a rank's out-of-memory (raised there as a
MemoryError naming the rank and the batch, see ranks.py) into a MemoryError of its own, which
``hpml.catch_out_of_memory()`` records as the finding.

Under torchrun or srun (``torchrun --nnodes=N --nproc-per-node=G -m pytest -m data_parallel``)
every rank runs the session and each run is the job's: a case of the job's world size runs on
the job's ranks, across its nodes; a case that needs another number of workers skips, on every
rank alike, saying so. Question 9 takes its nodes from the job, or emulates them on one machine.

Several questions read the same run (Q2's one-worker baseline serves every scaling
row; Q3.1 and Q3.2 read one synchronized + no_sync run), so a run is started once per
process and configuration. Runs are seeded: a second process starting the same run gets the
same model, and its own timings.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import torch

from pytest_hpml import Hpml, Recorder, Timing
from pytest_hpml.distributed import DistributedError, current_job, run_distributed
from suites.common.jobs import job_world_size, skip_unless_the_job_has
from suites.data_parallel.config import (
    SCALES,
    DataSpec,
    Recipe,
    Scale,
    data_for,
    scale_for,
    split_global_batch,
)
from suites.data_parallel.ranks import CPU_THREADS_PER_WORKER, RankResult, train_rank


def launch(fn: Callable[..., Any], world_size: int, *args: Any, device: str = "cpu",
           timeout: float = 300.0, **kwargs: Any) -> list[Any]:
    """run_distributed, with a rank's out-of-memory raised here as a MemoryError (every rank
    has been ended by then). In a job, a run of another size than the job's skips the test."""
    skip_unless_the_job_has(world_size)
    try:
        return run_distributed(fn, world_size, *args, device=device, timeout=timeout, **kwargs)
    except DistributedError as err:
        if err.exception_type in ("MemoryError", "OutOfMemoryError"):
            raise MemoryError(str(err).splitlines()[0]) from err
        # Any rank that reported running out of memory makes the run an out-of-memory finding,
        # whichever rank the launcher blames first (a peer killed before it could report).
        for kind, summary in err.raised.values():
            if kind in ("MemoryError", "OutOfMemoryError"):
                raise MemoryError(summary.split(": ", 1)[-1].splitlines()[0]) from err
        raise


#: The world sizes of the questions that need more than one worker (Q3.1, Q3.2, DataParallel).
MULTI_WORKERS = tuple(n for n in SCALES["full"].workers if n > 1)

#: The batch per worker of Q2, Q3.1, Q3.2 and DataParallel vs DDP, over the profile's sizes.
batch_per_worker_sweep = pytest.mark.hpml_sweep(
    "batch", quick=list(SCALES["quick"].per_worker_batches),
    full=list(SCALES["full"].per_worker_batches))


def device_workers(workers: tuple[int, ...] | list[int]) -> list[Any]:
    """(device, workers) cases: gloo CPU ranks for each world size, and a CUDA case per world
    size marked gpu and multi_gpu(n), which skips with a reason where fewer GPUs are visible."""
    cases = [pytest.param("cpu", n, id=f"cpu-{n}w") for n in workers]
    for n in workers:
        marks = [pytest.mark.gpu] + ([pytest.mark.multi_gpu(n)] if n > 1 else [])
        cases.append(pytest.param("cuda", n, marks=marks, id=f"cuda-{n}w"))
    return cases


#: Under every table of step times measured on GPUs (training.train_epoch's CUDA-event marks).
#: The all-reduce sweep queues a busy-wait ahead of its timed loop (time_back_to_back); a
#: training loop cannot: its steps are queued back to back, so only a step that follows an idle
#: moment starts on an idle GPU, and that moment is part of what training costs.
GPU_STEP_TIMES_NOTE = (
    "GPU step times: CUDA events around each step; a step that starts on an idle GPU (the first "
    "of an epoch, or one after the loader kept the GPU waiting) includes the host's time to queue "
    "it, which the training run pays too, so no busy-wait is queued ahead of a step (it would "
    "hide that time and lengthen the epoch)")


@dataclass(frozen=True)
class StepTimes:
    timing: Timing  # one sample per step (the slowest rank's), recorded as step_time
    total: float  # their sum: the epoch's training time


class Lab:
    def __init__(self, profile: str, device: str, data_root: str | Path | None) -> None:
        self.profile = profile
        self.device = device
        self.scale: Scale = scale_for(profile)
        self.data = data_for(profile, data_root)
        self._runs: dict[tuple, list[RankResult]] = {}

    def skip_unless_in_profile(self, workers: int | None = None) -> None:
        """CPU workers run the quick profile, and its world sizes (``workers=None``: a question
        that needs its own); GPUs run either profile (``multi_gpu(n)`` has already skipped
        what the GPUs present cannot run)."""
        if self.device != "cpu":
            return
        if self.profile == "full":
            pytest.skip("the full profile is the GPU experiment (ResNet-18, 50,000 images per "
                        "epoch): CPU workers run the quick profile")
        ranks = job_world_size()
        if ranks is not None:  # the job's size whatever the profile's list (launch: the others)
            return
        if workers is not None and workers not in self.scale.workers:
            pytest.skip(f"the quick profile runs {', '.join(map(str, self.scale.workers))} CPU "
                        f"workers here (4 only where the question needs them)")

    def nodes(self) -> tuple[int, int, bool]:
        """(nodes, ranks per node, emulated) of question 9: the job's, or nodes emulated on
        this machine with CPU ranks; skips where there is neither."""
        job = current_job()
        if job is not None and job.world_size > 1:
            return job.nodes, job.local_world_size, False
        if self.device != "cpu" or self.scale.emulated_nodes is None:
            pytest.skip("one node here: across nodes needs a job, e.g. torchrun --nnodes=2 "
                        "--nproc-per-node=G ... -m pytest, or srun (docs/slurm.sbatch)")
        nodes, per_node = self.scale.emulated_nodes
        return nodes, per_node, True

    def launch_nodes(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(rank, world_size, *args, device, ranks_per_node)`` on every rank of the nodes."""
        nodes, per_node, emulated = self.nodes()
        return launch(fn, nodes * per_node, *args, self.device, per_node if emulated else None,
                      device=self.device, timeout=self.scale.run_timeout)

    def batch_sweep_data(self) -> DataSpec:
        return data_for(self.profile, self.data.root, self.scale.batch_sweep_images)

    def recipe(self, **changes: Any) -> Recipe:
        return replace(Recipe(width=self.scale.width), **changes)

    def strong_scaling_recipe(self, global_batch: int, workers: int, **changes: Any) -> Recipe:
        """A fixed global batch split across the workers (refused when it cannot be)."""
        return self.recipe(batch_per_worker=split_global_batch(global_batch, workers), **changes)

    def large_batch_data(self) -> DataSpec:
        return data_for(self.profile, self.data.root, self.scale.large_batch_images,
                        self.scale.large_batch_eval_split)

    def train(self, workers: int, recipe: Recipe, memory_budget: int | None = None,
              data: DataSpec | None = None) -> list[RankResult]:
        """The ranks' results of one training run, started once per process."""
        data = data or self.data
        key = (workers, recipe, memory_budget, data)
        if key not in self._runs:
            self._runs[key] = launch(train_rank, workers, data, recipe, self.device,
                                     memory_budget, device=self.device,
                                     timeout=self.scale.run_timeout)
        return self._runs[key]

    def hardware(self, results: list[RankResult] | None = None) -> str:
        """What the figures were measured on, in every row: nobody should mistake 2 CPU cores
        for a GPU."""
        if self.device == "cuda":
            name = results[0].device if results else torch.cuda.get_device_name(0)
            return f"{name} (nccl)"
        return (f"{os.cpu_count()} CPU cores, {CPU_THREADS_PER_WORKER} thread per worker "
                f"(gloo)")

    def describe(self, hpml: Hpml | Recorder, results: list[RankResult] | None = None,
                 data: DataSpec | None = None, note: str = "") -> None:
        """The shared columns (where, on what data) and, under the table, what quick scaled
        down (and ``note``, what this table's runs scaled down besides). ``hpml``: the test's
        own row or a further one (``hpml.row``)."""
        data = data or self.data
        source = results[0].data if results else (
            "CIFAR-10" if data.root else "synthetic-CIFAR-10")
        images = data.train_images or "all"
        hpml.param(measured_on=self.hardware(results), data=f"{source}, {images} images")
        if self.scale.scaled_down:
            hpml.setting("resnet18_width", self.scale.width,
                         note="; ".join(n for n in (self.scale.scaled_down, note) if n))

    def note_step_times(self, hpml: Hpml | Recorder, name: str) -> None:
        """On GPUs, say under the table what the step times that ``name`` adds up include."""
        if self.device == "cuda":
            hpml.annotate(name, GPU_STEP_TIMES_NOTE)

    def record_steps(self, hpml: Hpml | Recorder, name: str, steps: list[float]) -> StepTimes:
        """Record an epoch's steps as ``step_time`` (median, each step a sample) and their sum
        as ``name``, derived from that timing so that its verdict rests on the steps'
        evidence."""
        timing = hpml.record_timing("step_time", list(steps))
        total = sum(steps)
        hpml.record(name, total, unit="s", better="lower", timing=timing)
        self.note_step_times(hpml, name)
        return StepTimes(timing, total)


def large_batch_variants(lab: Lab, workers: int) -> dict[str, tuple[int, Recipe]]:
    """Q4's runs, name -> (workers, recipe): lab 2's batch on one worker, the large
    batch on ``workers``, then each of Goyal et al.'s remedies added. Each rank also scores
    its model at the end (Q6 and Q7 read these runs)."""
    scale = lab.scale
    base = lab.recipe(batch_per_worker=scale.baseline_batch, epochs=scale.large_batch_epochs,
                      lr=scale.baseline_lr, lr_batch=scale.baseline_batch,
                      augment=scale.large_batch_augment, evaluate=True)
    large = replace(base, batch_per_worker=scale.large_batch)
    return {
        f"batch {base.batch_per_worker} on 1 worker": (1, base),
        f"batch {large.batch_per_worker} x {workers} workers": (workers, large),
        "+ linear lr scaling": (workers, replace(large, linear_scaling=True)),
        f"+ linear lr scaling + {scale.warmup_epochs}-epoch warm-up": (workers, replace(
            large, linear_scaling=True, warmup_epochs=scale.warmup_epochs)),
    }
