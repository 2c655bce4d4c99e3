"""Question 2: what speedup do 2 and 4 workers give, and is it weak or strong scaling?

Measured both ways instead of argued: weak scaling keeps the batch per worker (the global batch
grows with the workers, as the lab's table does), strong scaling keeps the global batch (each
worker gets 1/N of it). Each row is one epoch over the same training set, the 2nd, timed with
every training component (loading, copies, compute, communication); the epoch takes as long as
its slowest worker, and the spread between workers is recorded as imbalance.
"""

from __future__ import annotations

import math

import pytest

from suites.common.data import SIZES
from suites.data_parallel.config import SCALES
from suites.data_parallel.figures import (
    PUBLISHED_EPOCH_TIME,
    PUBLISHED_SOURCE,
    efficiency,
    imbalance,
    loss_and_accuracy,
    rank_epoch_times,
    speedup,
)
from suites.data_parallel.lab import batch_per_worker_sweep, device_workers

pytestmark = pytest.mark.data_parallel


@pytest.mark.parametrize("device, workers", device_workers(SCALES["full"].workers))
@batch_per_worker_sweep
@pytest.mark.parametrize("scaling", ["weak", "strong"])
@pytest.mark.hpml_pivot(index=["measured_on", "scaling", "batch"], columns="workers",
                        metrics=["epoch_time", "speedup", "efficiency", "rank_imbalance"],
                        split="device")
@pytest.mark.hpml_plot("q2_speedup_cpu.png", x="workers", y="speedup", series="curve",
                       where={"device": "cpu"}, ylabel="speedup (1 worker = 1)",
                       title="Q2: speedup of an epoch, weak vs strong scaling (CPU workers)")
@pytest.mark.hpml_plot("q2_speedup_gpu.png", x="workers", y="speedup", series="curve",
                       where={"device": "cuda"}, ylabel="speedup (1 GPU = 1)",
                       title="Q2: speedup of an epoch, weak vs strong scaling (GPUs)")
def test_speedup_weak_and_strong_scaling(hpml, device, workers, batch, scaling, lab):
    hpml.experiment = "Q2: speedup (2nd epoch, every component) - weak vs strong scaling"
    lab.skip_unless_in_profile(workers)
    # `batch`: per worker under weak scaling, the global batch under strong scaling.
    recipe = (lab.recipe(batch_per_worker=batch) if scaling == "weak"
              else lab.strong_scaling_recipe(batch, workers))
    one = lab.train(1, lab.recipe(batch_per_worker=batch))
    many = one if workers == 1 else lab.train(workers, recipe)
    lab.describe(hpml, many)
    hpml.param(global_batch=recipe.global_batch(workers), per_worker=recipe.batch_per_worker,
               curve=f"{scaling}, batch {batch}")

    times = rank_epoch_times(many, 2)
    gain = speedup(max(rank_epoch_times(one, 2)), max(times))
    epoch_time = hpml.record_timing("epoch_time", [max(times)])
    hpml.annotate("epoch_time", "epoch_time: the slowest worker's 2nd epoch, loading included")
    # Both follow the epoch time's verdict: one worker's epoch, the reference, is measured
    # apart and drifts on its own.
    hpml.record("speedup", gain, better="higher", timing=epoch_time)
    hpml.record("efficiency", efficiency(gain, workers), unit="", better="higher",
                timing=epoch_time, note="efficiency: speedup / workers (1 = perfect scaling)")
    hpml.record("rank_imbalance", 100 * imbalance(times), unit="%",
                note="rank_imbalance: (slowest - fastest worker's epoch) / slowest", better="lower")
    hpml.record("fastest_worker_time", min(times), unit="s")
    if scaling == "weak" and batch in PUBLISHED_EPOCH_TIME:
        with hpml.row(measured_on="published: seed report 001 (GPUs)") as ref:
            ref.reference("epoch_time", PUBLISHED_EPOCH_TIME[batch][workers], unit="s",
                          source=PUBLISHED_SOURCE)

    # Every worker ends with the same model: DDP's all-reduce kept them in step.
    assert len({r.parameters_digest for r in many}) == 1
    # Together the workers covered the whole training set in the epoch.
    assert sum(r.epoch(2).samples for r in many) >= (lab.data.train_images
                                                      or SIZES["train"]["CIFAR-10"])
    loss, _ = loss_and_accuracy(many, 2)
    assert math.isfinite(loss)
