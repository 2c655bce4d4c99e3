"""DataParallel or DistributedDataParallel on the same GPUs? (The handout runs DataParallel;
the issue asks for the comparison.)

The same model, recipe, per-GPU batch and loop; DataParallel in one process (scatter, replicate,
gather, gradients summed on GPU 0), DDP with one process per GPU (gradient buckets all-reduced
while backward runs). The 2nd epoch, every component included. GPU only: DataParallel needs
CUDA, so these rows come from a machine with at least 2 GPUs.
"""

from __future__ import annotations

import math

import pytest

from suites.common.data import SIZES
from suites.data_parallel.figures import rank_epoch_times, training_time
from suites.data_parallel.lab import MULTI_WORKERS, batch_per_worker_sweep
from suites.data_parallel.training import dataparallel_epochs

pytestmark = [pytest.mark.data_parallel, pytest.mark.hpml_devices("cuda")]


@pytest.mark.parametrize("workers", [pytest.param(n, marks=pytest.mark.multi_gpu(n), id=f"{n}gpu")
                                     for n in MULTI_WORKERS])
@batch_per_worker_sweep
@pytest.mark.hpml_pivot(index=["measured_on", "workers", "batch"], columns="wrapper",
                        metrics=["epoch_time", "training_time"])
def test_dataparallel_vs_ddp(hpml, device, workers, batch, lab):
    hpml.experiment = "DataParallel vs DistributedDataParallel (2nd epoch, same GPUs)"
    recipe = lab.recipe(batch_per_worker=batch)
    ddp = lab.train(workers, recipe)
    lab.describe(hpml, ddp)
    dp = dataparallel_epochs(workers, lab.data, recipe)[1]
    with hpml.row(wrapper="DataParallel") as row:
        row.record("epoch_time", dp.wall, unit="s", better="lower")
        row.record("training_time", dp.training_time, unit="s", better="lower")
    with hpml.row(wrapper="DistributedDataParallel") as row:
        row.record("epoch_time", max(rank_epoch_times(ddp, 2)), unit="s", better="lower")
        row.record("training_time", training_time(ddp, 2), unit="s", better="lower")
        lab.note_step_times(row, "training_time")
    # Both walked the whole training set in the epoch (DDP's shards are padded to equal size)
    # and both trained: a finite loss.
    images = lab.scale.train_images or SIZES["train"]["CIFAR-10"]
    assert dp.samples == images <= sum(r.epoch(2).samples for r in ddp)
    assert math.isfinite(dp.loss_sum)
