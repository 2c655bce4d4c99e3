"""The lab's shared state: the data of each recipe and its training runs, made once per
session and process, so the time-to-accuracy, stability and generalization tests read the same
runs (the lab's "10 trained models per device").

Runs are cached in memory per (device, recipe, seeding), not in files: a quick run takes about a
second, so an xdist worker training its own copy costs less than a file cache would need to get
right. The runs are seeded, so every worker's copy has the same curves on the CPU; only the
times differ, as times do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch

from suites.common.data import load_cifar10
from suites.common.threads import one_cpu_thread

from .recipes import RECIPES, RUNS, Recipe, seeds
from .training import Run, train_to_accuracy


@dataclass
class RecipeData:
    train: tuple[torch.Tensor, torch.Tensor]  # images in [0, 1], labels
    val: tuple[torch.Tensor, torch.Tensor]  # the validation (= test) split the target is on
    source: str  # "CIFAR-10" or "synthetic-CIFAR-10": every row says which
    synthetic: bool


@dataclass
class TTALab:
    profile: str
    data_root: Path | None
    download: bool
    _data: dict[tuple, RecipeData] = field(default_factory=dict)
    _runs: dict[tuple, list[Run]] = field(default_factory=dict)

    def recipe(self, name: str, device: torch.device) -> Recipe:
        """The recipe, or a skip when it is not meant for this device."""
        recipe = RECIPES[name]
        if device.type not in recipe.devices:
            pytest.skip(f"recipe {name} runs on {' and '.join(recipe.devices)} only: "
                        f"{recipe.max_epochs} epochs of {recipe.model} would take hours on "
                        f"{device.type}; its {device.type} rows come from small-cnn")
        return recipe

    def data(self, recipe: Recipe) -> RecipeData:
        key = (recipe.train_images, recipe.val_images)
        if key not in self._data:
            train = load_cifar10("train", self.data_root, self.download, recipe.train_images)
            val = load_cifar10("test", self.data_root, self.download, recipe.val_images)
            self._data[key] = RecipeData((train.images, train.labels), (val.images, val.labels),
                                         train.source, train.synthetic)
        return self._data[key]

    def runs(self, recipe: Recipe, device: torch.device, seeding: str) -> list[Run]:
        """RUNS[profile] training runs of the recipe on the device, seeded as `seeding` says."""
        key = (recipe.name, device.type, seeding)
        if key not in self._runs:
            data = self.data(recipe)
            with one_cpu_thread(device):
                self._runs[key] = [train_to_accuracy(recipe, data.train, data.val, device, s)
                                   for s in seeds(seeding, RUNS[self.profile])]
        return self._runs[key]
