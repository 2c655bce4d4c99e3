"""Question 1: how long does one epoch take on one device as the batch grows, from 32 up by x4
until the device's memory cannot hold the batch?

Two epochs, the second timed; the training time includes the host-to-device copy, forward,
backward and update of every step and excludes data loading (recorded beside it). The batch
that does not fit is a finding, not a crash: its row says "out of memory".
"""

from __future__ import annotations

import pytest

from suites.common.data import SIZES
from suites.data_parallel.config import SCALES
from suites.data_parallel.figures import slowest_steps

pytestmark = pytest.mark.data_parallel


@pytest.mark.hpml_sweep("batch", quick=list(SCALES["quick"].batches),
                        full=list(SCALES["full"].batches))
@pytest.mark.hpml_plot("q1_epoch_time_vs_batch.png", x="batch", y="training_time",
                       series="measured_on", logx=True, xlabel="batch size",
                       ylabel="training time of the 2nd epoch",
                       title="Q1: training time of one epoch vs batch size (one device)")
def test_epoch_time_vs_batch_size(hpml, device, batch, lab):
    hpml.experiment = "Q1: epoch time vs batch size on one device (2nd epoch)"
    lab.skip_unless_in_profile(1)
    budget = lab.scale.memory_budget if device == "cpu" else None
    data = lab.batch_sweep_data()
    with hpml.catch_out_of_memory() as oom:
        results = lab.train(1, lab.recipe(batch_per_worker=batch), budget, data)
    lab.describe(hpml, None if oom.happened else results, data)
    if budget is not None:
        hpml.setting("memory_budget", budget, unit="B", note=lab.scale.memory_note)
    if oom.happened:
        # The finding (fits_in_memory = 0) is recorded; it must be this batch's, on the worker.
        assert f"at batch {batch} per worker" in oom.message, oom.message
        return
    epoch = results[0].epoch(2)
    steps = lab.record_steps(hpml, "training_time", slowest_steps(results, 2))
    hpml.record("images_per_second", epoch.samples / steps.total, unit="1/s", better="higher",
                timing=steps.timing)
    hpml.record("loader_wait", epoch.loader_wait, unit="s",
                note="loader_wait: time spent waiting for the DataLoader, outside training_time")
    if results[0].peak_memory is not None:
        hpml.record("peak_memory", results[0].peak_memory, unit="B", better="lower")
    # One epoch is the whole training set, once, in steps of `batch` (the last may be smaller).
    assert epoch.samples == (data.train_images or SIZES["train"]["CIFAR-10"])
    assert len(epoch.step_times) == -(-epoch.samples // batch)
