"""Experiments 4 and 5: how busy is the device while the job trains, and what raises it?

4. Utilization sampled in the background at a fixed interval while a training run goes (3
   minutes in the full profile): on a GPU, NVML's core and memory utilization, memory used and
   SM clock; on a CPU, the process tree's CPU utilization (% of all cores). The time series is
   charted; the table shows its average.
5. The usual remedies (remedies.py), one at a time from a plain baseline: time per epoch and
   utilization before and after, in one table; the GPU-only ones are listed on a CPU, not run.

CPU rows train on one intra-op thread (see suites.common.threads), so one busy core is
100 / cores % of the CPU.
"""

from __future__ import annotations

import math
import os
import statistics

import pytest

from suites.common.threads import one_cpu_thread
from suites.tta.recipes import RECIPE_SWEEP, REMEDY_SETTINGS, UTILIZATION
from suites.tta.remedies import ALL, FULL_ONLY, REMEDIES, applied, why_not_run
from suites.tta.training import Trainer

pytestmark = pytest.mark.tta

BUSY = 90.0  # % below which the lab applies the remedies

CPU, GPU = {"device": "cpu"}, {"device": "cuda"}


@pytest.mark.hpml_sweep("recipe", **RECIPE_SWEEP)
@pytest.mark.hpml_plot("tta_utilization_cpu.png", kind="timeseries", y=["cpu_util"],
                       series="recipe", where=CPU, ylabel="CPU utilization [% of all cores]",
                       title="CPU utilization while training")
@pytest.mark.hpml_plot("tta_utilization_gpu.png", kind="timeseries",
                       y=["gpu_util", "gpu_memory_util", "cpu_util"], series="recipe",
                       where=GPU, ylabel="utilization [%]",
                       title="GPU core and memory utilization (NVML) and CPU while training")
@pytest.mark.hpml_plot("tta_gpu_memory_used.png", kind="timeseries", y=["gpu_memory_used"],
                       series="recipe", where=GPU, ylabel="GPU memory used",
                       title="GPU memory used while training (NVML)")
@pytest.mark.hpml_plot("tta_sm_clock.png", kind="timeseries", y=["sm_clock"], series="recipe",
                       where=GPU, ylabel="SM clock", title="SM clock while training (NVML)")
def test_device_utilization(hpml, device, recipe, tta_lab):
    recipe = tta_lab.recipe(recipe, hpml.device)
    data = tta_lab.data(recipe)
    settings = UTILIZATION[hpml.profile]
    hpml.experiment = "TTA 4: device utilization while training"
    hpml.param(data=data.source)
    hpml.setting("cpu_cores", os.cpu_count() or 1)

    with one_cpu_thread(hpml.device):
        trainer = Trainer(recipe, *data.train, hpml.device, seed=0)
        with hpml.sample_utilization(interval=settings["interval"]) as sampler:
            trained = trainer.run_for(settings["seconds"])

    hpml.record("training_time", trained.seconds, unit="s")
    hpml.record("images_per_second", trained.images / trained.seconds, unit="1/s",
                better="higher")
    hpml.check("utilization_samples", len(sampler.times), at_least=3,
               note="utilization samples: readings taken while training")
    assert sampler.mean("cpu_util") > 0, "the sampler saw no CPU time while training ran"
    assert math.isfinite(trained.mean_loss)
    if hpml.device.type == "cuda" and "gpu_util" in sampler.values:
        busy = sampler.mean("gpu_util")
        hpml.annotate("gpu_util", f"gpu util: mean over the run; {busy:.0f} % is "
                      + ("close to 100 %" if busy >= BUSY else f"below {BUSY:.0f} %: see TTA 5"))


@pytest.mark.hpml_sweep("recipe", **RECIPE_SWEEP)
@pytest.mark.hpml_plot("tta_remedies_cpu.png", kind="timeseries", y=["cpu_util"],
                       series="remedy", where=CPU, ylabel="CPU utilization [% of all cores]",
                       title="CPU utilization per remedy (timed epochs)")
@pytest.mark.hpml_plot("tta_remedies_gpu.png", kind="timeseries", y=["gpu_util"],
                       series="remedy", where=GPU, ylabel="GPU utilization [%]",
                       title="GPU utilization per remedy (timed epochs)")
def test_raising_utilization(hpml, device, recipe, tta_lab):
    recipe = tta_lab.recipe(recipe, hpml.device)
    data = tta_lab.data(recipe)
    settings = REMEDY_SETTINGS[hpml.profile]
    hpml.experiment = "TTA 5: raising utilization, one remedy at a time"
    hpml.param(data=data.source)
    images, labels = (t[:settings["train_images"]] for t in data.train)
    baseline_epoch = None

    for name in [r.name for r in REMEDIES] + [ALL]:
        remedy = next((r for r in REMEDIES if r.name == name), None)
        reason = why_not_run(remedy, hpml.device.type, hpml.profile) if remedy else None
        tuned = applied(recipe, name, hpml.device.type, hpml.profile)
        with hpml.row(remedy=name) as row:
            row.param(status=reason or "run")
            row.setting("batch_size", tuned.batch_size,
                        note=remedy.why_not_quick if reason == FULL_ONLY else None)
            if reason is not None:
                continue
            with one_cpu_thread(hpml.device):
                trainer = Trainer(tuned, images, labels, hpml.device, seed=0)
                # Untimed: worker start-up, compilation, cuDNN autotuning, CUDA graph capture.
                warmup = trainer.run_epoch(0)
                with row.sample_utilization(interval=settings["interval"]):
                    epochs = [trainer.run_epoch(e + 1) for e in range(settings["epochs"])]
            del trainer  # ends its DataLoader workers before the next remedy starts its own

            per_epoch = [e.seconds for e in epochs]
            time_per_epoch = statistics.median(per_epoch)
            baseline_epoch = baseline_epoch or time_per_epoch
            epoch_time = row.record_timing("time_per_epoch", per_epoch)
            row.record("images_per_second", epochs[0].images / time_per_epoch, unit="1/s",
                       better="higher", samples=[e.images / e.seconds for e in epochs])
            # Judged as this remedy's epoch time is (the baseline's is its own row's).
            row.record("speedup", baseline_epoch / time_per_epoch, better="higher",
                       timing=epoch_time,
                       note="speedup: the baseline's time per epoch over this one's")
            row.record("warmup_epoch", warmup.seconds, unit="s",
                       note="warmup epoch: the first, untimed epoch (start-up, compilation)")
            # A remedy that breaks training is no remedy: the loss must stay finite and fall.
            assert all(math.isfinite(e.mean_loss) for e in [warmup, *epochs]), name
            assert epochs[-1].mean_loss < warmup.mean_loss, f"{name}: the loss did not fall"
