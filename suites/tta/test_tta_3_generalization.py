"""Experiment 3: do models trained for time to accuracy generalize beyond the test set they
were stopped on? Every trained model of the lab (both seedings) is scored on the clean
validation images and on a shifted test set it was never tuned on (shift.py: noise, blur,
contrast and JPEG-like corruptions of the same images, and your own labelled photos when
HPML_TTA_WILD_IMAGES names a folder). Mean and standard deviation across the models, per
device."""

from __future__ import annotations

import copy
import statistics

import pytest
import torch

from suites.tta.recipes import RECIPE_SWEEP, SEEDINGS
from suites.tta.shift import load_image_folder, shifted_test_sets, wild_images_folder
from suites.tta.training import accuracy

pytestmark = pytest.mark.tta

EXPERIMENT = "TTA 3: generalization of the trained models, clean and shifted"
CLEAN = "clean (validation images)"
ALL_CORRUPTIONS = "shifted: all four corruptions"


@pytest.mark.hpml_sweep("recipe", **RECIPE_SWEEP)
def test_generalization(hpml, device, recipe, tta_lab):
    recipe = tta_lab.recipe(recipe, hpml.device)
    data = tta_lab.data(recipe)
    runs = [run for seeding in SEEDINGS for run in tta_lab.runs(recipe, hpml.device, seeding)]
    hpml.experiment = EXPERIMENT
    hpml.param(data=data.source, models=len(runs))

    images, labels = data.val
    test_sets = {CLEAN: (images, labels)}
    test_sets.update({name: (shifted, labels)
                      for name, shifted in shifted_test_sets(images).items()})
    test_sets[ALL_CORRUPTIONS] = (torch.cat([test_sets[n][0] for n in list(test_sets)[1:]]),
                                  labels.repeat(len(test_sets) - 1))
    if (folder := wild_images_folder()) is not None:
        test_sets[f"photos from {folder}"] = load_image_folder(folder)

    scores: dict[str, list[float]] = {name: [] for name in test_sets}
    for run in runs:
        model = copy.deepcopy(run.model).to(hpml.device)  # the cache keeps its CPU copy
        for name, (x, y) in test_sets.items():
            scores[name].append(accuracy(model, x, y, hpml.device,
                                         channels_last=recipe.channels_last, bf16=recipe.bf16))
        # The model kept is the one the run stopped with: scored again on the validation
        # images it must give the accuracy logged at its last evaluation.
        rescored, logged = scores[CLEAN][-1], run.final.accuracy
        assert abs(rescored - logged) <= (0.0 if hpml.device.type == "cpu" else 0.2), \
            f"seed {run.seed}: rescored {rescored:.2f} % but the run logged {logged:.2f} %"

    clean_mean = statistics.fmean(scores[CLEAN])
    for name, values in scores.items():
        with hpml.row(test_set=name, images=len(test_sets[name][1])) as row:
            mean = statistics.fmean(values)
            row.record("accuracy", mean, unit="%", better="higher", samples=values,
                       note="accuracy: mean over the models (one sample per model)")
            row.record("accuracy_std", statistics.stdev(values) if len(values) > 1 else 0.0,
                       unit="%", note="accuracy std: across the models (n - 1)", better="lower")
            row.record("drop_from_clean", clean_mean - mean, unit="%",
                       note="drop from clean: mean clean accuracy minus this set's", better="lower")
    # Chance is 10 %: a mean this low means the models did not train, whatever the target.
    assert clean_mean > 30, "the trained models are near chance on the clean images"
