"""Experiment 2: how stable is time to accuracy across runs of the same job, per device?
The coefficient of variation (CV) of the runs' times to accuracy, with different seeds (data
order, initialization and augmentation vary) and with the same seed (only nondeterministic
kernels and the machine's timing noise vary); runs that never reached the target within the
cap are counted, not dropped. Coleman et al. (2019, Table 3a) report the CV for ResNet-50 on
ImageNet; see reference.py for why no figure is shown yet. Beside the same-seed rows, the one
run-to-run spread the course's documents publish (seed report 000: the same training job
repeated 10 times on a 4 x V100 node), labelled as a reference."""

from __future__ import annotations

import statistics

import pytest

from suites.tta.recipes import RECIPE_SWEEP, RUNS, SEEDINGS
from suites.tta.reference import (
    COLEMAN_MISSING_NOTE,
    COLEMAN_SOURCE,
    COLEMAN_TTA_CV_PERCENT,
    SEED_000_SOURCE,
    SEED_000_TIME_CV_PERCENT,
)
from suites.tta.stability import Stability, jackknife_cvs, max_curve_difference

pytestmark = pytest.mark.tta

EXPERIMENT = "TTA 2: stability of time to accuracy across runs"


@pytest.mark.hpml_sweep("recipe", **RECIPE_SWEEP)
@pytest.mark.parametrize("seeding", SEEDINGS)
def test_time_to_accuracy_stability(hpml, device, recipe, seeding, tta_lab):
    recipe = tta_lab.recipe(recipe, hpml.device)
    runs = tta_lab.runs(recipe, hpml.device, seeding)
    stability = Stability.of(runs)
    hpml.experiment = EXPERIMENT
    hpml.param(data=tta_lab.data(recipe).source, runs=stability.runs)
    hpml.setting("target", recipe.target, unit="%")

    # Not reached: one sample per run (1 = not reached within the cap), judged exactly.
    hpml.record("not_reached", stability.not_reached, better="lower", tolerance=0.0,
                samples=[0.0 if r.reached else 1.0 for r in runs],
                note=f"not reached: runs without the target after {recipe.max_epochs} epochs")
    if stability.reached:
        hpml.record("time_to_accuracy", statistics.fmean(stability.times), unit="s",
                    better="lower", samples=stability.times,
                    note="time to accuracy: mean over the runs that reached the target")
        hpml.record("epochs_to_target", statistics.fmean(stability.epochs), better="lower",
                    samples=stability.epochs)
    if stability.reached >= 2:
        # A CV from 5 runs has a relative standard error of about 1 / sqrt(2 (n - 1)) = 35 %:
        # a baseline comparison flags only changes beyond two of those.
        hpml.record("tta_cv", 100 * stability.cv, unit="%", better="lower", tolerance=0.7,
                    samples=[100 * cv for cv in jackknife_cvs(stability.times)],
                    note="tta_cv: stdev / mean of the times to accuracy (n - 1); its spread is "
                         "the jackknife's (each run left out in turn)")
    else:
        hpml.expect_missing("tta_cv")
    if COLEMAN_TTA_CV_PERCENT is not None:
        hpml.reference("published_tta_cv", COLEMAN_TTA_CV_PERCENT, unit="%",
                       source=COLEMAN_SOURCE)
    else:
        hpml.annotate("not_reached", COLEMAN_MISSING_NOTE)
    if seeding == "same seed":
        # The same job repeated on other hardware, as the course's documents publish it: the
        # spread of a fixed amount of work, beside this device's.
        with hpml.row(device="4 x V100 (published)", recipe="MLP (lab of seed 000)",
                      data="MNIST", runs=10) as published:
            published.reference("tta_cv", SEED_000_TIME_CV_PERCENT, unit="%",
                                source=SEED_000_SOURCE)

    # Same seed, same device: does anything but the clock vary? On a CPU every kernel is
    # deterministic (one thread), so the curves must agree exactly; on a GPU the difference
    # measures cuDNN's nondeterministic kernels (atomics in the weight gradients).
    difference = max_curve_difference([r.curve for r in runs])
    if seeding == "same seed" and hpml.device.type == "cpu":
        hpml.check("max_accuracy_difference", difference, at_most=0.0, unit="%",
                   note="max accuracy difference: largest gap between the runs' curves")
    elif seeding == "same seed":
        hpml.record("max_accuracy_difference", difference, unit="%",
                    note="max accuracy difference: largest gap between the runs' curves "
                         "(nonzero: nondeterministic kernels)", better="lower")
    else:
        hpml.record("max_accuracy_difference", difference, unit="%",
                    note="max accuracy difference: largest gap between the runs' curves",
                    better="lower")
        assert difference > 0, "different seeds gave identical curves: the seed is not used"
    # The lab's requirement: at least 5 runs per configuration, every one of them counted.
    assert stability.runs == RUNS[hpml.profile] >= 5
