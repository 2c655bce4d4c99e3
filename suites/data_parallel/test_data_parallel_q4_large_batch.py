"""Question 4: what happens to training loss and accuracy with the largest batch per worker on
4 workers, against batch 128 on one, and how much do Goyal et al.'s two remedies win back?

Five epochs each; the 5th epoch's average training loss and accuracy (over every worker's
samples, as the lab asks). The large global batch takes k times fewer steps per epoch. Remedy 1,
linear scaling: the learning rate times k = global batch / 128. Remedy 2, gradual warm-up:
start at the small-batch rate and reach k times it over the first epochs, so that the large
rate does not wreck the early, fast-changing network.
"""

from __future__ import annotations

import math

import pytest

from suites.data_parallel.figures import (
    PUBLISHED_LARGE_BATCH,
    PUBLISHED_SOURCE,
    gap_closed,
    loss_and_accuracy,
)
from suites.data_parallel.lab import device_workers, large_batch_variants

pytestmark = pytest.mark.data_parallel

WORKERS = 4


def _record_gap_closed(row, baseline: tuple[float, float], large: tuple[float, float],
                       remedy: tuple[float, float]) -> None:
    # Loss negated so that for both figures higher is better; no gap (the large batch did as
    # well), no share of it to close.
    for name, sign, index in (("loss", -1, 0), ("accuracy", 1, 1)):
        gap = sign * (baseline[index] - large[index])
        if gap > 0:
            row.record(f"{name}_gap_closed", 100 * gap_closed(
                sign * baseline[index], sign * large[index], sign * remedy[index]),
                unit="%", better="higher", note="*_gap_closed: share of the large batch's "
                "shortfall from the baseline that the remedy wins back (100 %: all of it)")


@pytest.mark.parametrize("device, workers", device_workers((WORKERS,)))
def test_large_batch_and_its_remedies(hpml, device, workers, lab):
    hpml.experiment = ("Q4: large batch on 4 workers vs lab 2's batch on one, and Goyal et "
                       "al.'s remedies (5th epoch)")
    lab.skip_unless_in_profile()
    epochs = lab.scale.large_batch_epochs
    data = lab.large_batch_data()
    scores: list[tuple[float, float]] = []  # (loss, accuracy) of each variant, in order
    for name, (n, recipe) in large_batch_variants(lab, WORKERS).items():
        results = lab.train(n, recipe, data=data)
        loss, accuracy = loss_and_accuracy(results, epochs)
        scores.append((loss, accuracy))
        with hpml.row(variant=name) as row:
            lab.describe(row, results, data, note=lab.scale.large_batch_note)
            row.param(workers=n, global_batch=recipe.global_batch(n))
            row.setting("peak_lr", recipe.peak_lr(n))
            row.setting("steps_per_epoch", results[0].steps_per_epoch)
            row.record("train_loss", loss, better="lower")
            row.record("train_accuracy", 100 * accuracy, unit="%", better="higher")
            if len(scores) > 2:  # a remedy: how much of the baseline-vs-large gap it closes
                _record_gap_closed(row, scores[0], scores[1], (loss, accuracy))
        # Correctness, not speed: the schedule ended at its peak, the workers agree, the loss
        # is a number.
        assert results[0].epoch(epochs).last_lr == pytest.approx(recipe.peak_lr(n))
        assert len({r.parameters_digest for r in results}) == 1
        assert math.isfinite(loss)
    # Published rows say where they were measured (GPUs), not this test's device.
    for name, (gpus, loss, accuracy) in PUBLISHED_LARGE_BATCH.items():
        with hpml.row(variant=name, device="GPUs", workers=gpus,
                      measured_on="published: seed report 001 (GPUs)") as ref:
            ref.reference("train_loss", loss, source=PUBLISHED_SOURCE)
            ref.reference("train_accuracy", 100 * accuracy, unit="%", source=PUBLISHED_SOURCE)
