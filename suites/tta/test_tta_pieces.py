"""The lab's instruments on known answers: the statistics of repeated runs, when a run counts
as reaching its target, the input pipeline's determinism, the schedule, the corruptions of the
shifted test set, photo folders, and which remedy applies where. Fast, CPU only."""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import replace

import pytest
import torch
from PIL import Image

from suites.tta.loader import make_loader
from suites.tta.models import MODELS, build_model
from suites.tta.recipes import RECIPES, SEEDINGS, Recipe, seeds
from suites.tta.remedies import (
    ALL,
    FULL_ONLY,
    GPU_ONLY,
    REMEDIES,
    applied,
    baseline,
    why_not_run,
)
from suites.tta.shift import (
    CIFAR10_CLASSES,
    contrast,
    dct_matrix,
    gaussian_blur,
    gaussian_noise,
    jpeg_like,
    load_image_folder,
    quantization_tables,
    shifted_test_sets,
)
from suites.tta.stability import (
    Stability,
    coefficient_of_variation,
    jackknife_cvs,
    max_curve_difference,
)
from suites.tta.training import Evaluation, Run, Trainer, first_reaching, train_to_accuracy

pytestmark = pytest.mark.tta

CPU = torch.device("cpu")


def _curve(*accuracies: float, every: int = 10) -> list[Evaluation]:
    return [Evaluation(step=every * (i + 1), epoch=(i + 1) / 4, train_seconds=1.0 * (i + 1),
                       wall_seconds=1.5 * (i + 1), accuracy=a) for i, a in enumerate(accuracies)]


def _run(*accuracies: float, target: float = 50.0, seed: int = 0) -> Run:
    return Run("fake", seed, target, 1, _curve(*accuracies), torch.nn.Identity())


def _images(n: int = 16, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(seed))


# -- statistics of repeated runs ----------------------------------------------------------------

def test_coefficient_of_variation_is_sample_stdev_over_mean() -> None:
    assert coefficient_of_variation([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert coefficient_of_variation([5.0, 5.0]) == 0.0
    assert math.isnan(coefficient_of_variation([3.0]))  # one run has no spread, not zero
    with pytest.raises(ValueError, match="positive mean"):
        coefficient_of_variation([0.0, 0.0])


def test_jackknife_leaves_each_run_out_once() -> None:
    times = [10.0, 11.0, 13.0, 20.0]
    cvs = jackknife_cvs(times)
    assert cvs == [pytest.approx(statistics.stdev(rest) / statistics.fmean(rest)) for rest in
                   ([11, 13, 20], [10, 13, 20], [10, 11, 20], [10, 11, 13])]
    assert min(cvs) == cvs[3]  # leaving the outlier out gives the smallest CV
    assert jackknife_cvs([1.0, 2.0]) == []


def test_first_reaching_is_the_first_evaluation_at_or_above_the_target() -> None:
    curve = _curve(20.0, 49.9, 50.0, 40.0, 70.0)
    assert first_reaching(curve, 50.0) is curve[2]
    assert first_reaching(curve, 70.0) is curve[4]
    assert first_reaching(curve, 70.1) is None


def test_runs_that_miss_the_target_are_counted_not_dropped() -> None:
    runs = [_run(30.0, 55.0), _run(30.0, 40.0), _run(60.0), _run(45.0, 48.0, 52.0)]
    stability = Stability.of(runs)
    assert (stability.runs, stability.reached, stability.not_reached) == (4, 3, 1)
    assert stability.times == [2.0, 1.0, 3.0]  # training seconds at the first reaching point
    assert stability.epochs == [0.5, 0.25, 0.75]
    assert stability.cv == pytest.approx(0.5)
    assert math.isnan(Stability.of([_run(10.0), _run(20.0)]).cv)  # none reached: no CV


def test_curve_difference_compares_the_shared_evaluations() -> None:
    assert max_curve_difference([_curve(10, 20, 30), _curve(10, 20, 30)]) == 0.0
    assert max_curve_difference([_curve(10, 20, 30), _curve(10, 25), _curve(9, 20, 30)]) == 5.0
    with pytest.raises(ValueError):
        max_curve_difference([])


def test_seedings() -> None:
    assert seeds("different seeds", 5) == [0, 1, 2, 3, 4]
    assert seeds("same seed", 3) == [0, 0, 0]
    assert set(SEEDINGS) == {"different seeds", "same seed"}
    with pytest.raises(ValueError, match="seeding"):
        seeds("random", 2)


# -- training runs --------------------------------------------------------------------------------

def _tiny(**changes) -> tuple[Recipe, tuple, tuple]:
    recipe = replace(RECIPES["small-cnn"], **{**dict(train_images=256, val_images=64,
                                                  batch_size=64, eval_every=2, max_epochs=2),
                                               **changes})
    g = torch.Generator().manual_seed(0)
    train = (torch.rand(256, 3, 32, 32, generator=g), torch.randint(0, 10, (256,), generator=g))
    val = (torch.rand(64, 3, 32, 32, generator=g), torch.randint(0, 10, (64,), generator=g))
    return recipe, train, val


def test_a_run_that_cannot_reach_its_target_stops_at_the_cap() -> None:
    recipe, train, val = _tiny(target=100.0)  # labels are noise: 100 % is out of reach
    run = train_to_accuracy(recipe, train, val, CPU, seed=0)
    assert not run.reached and run.time_to_accuracy is None
    assert [e.step for e in run.curve] == [2, 4, 6, 8]  # every 2 steps, 4 steps an epoch
    assert run.final.epoch == recipe.max_epochs
    times = [e.train_seconds for e in run.curve]
    assert times == sorted(times)
    assert all(e.train_seconds < e.wall_seconds for e in run.curve)  # evaluations excluded


def test_a_run_stops_at_the_first_evaluation_meeting_its_target() -> None:
    recipe, train, val = _tiny(target=0.1)  # any trained model has some image right
    run = train_to_accuracy(recipe, train, val, CPU, seed=0)
    assert run.reached and len(run.curve) == 1 and run.at_target is run.final
    assert run.time_to_accuracy == run.curve[0].train_seconds
    assert not run.model.training and next(run.model.parameters()).device.type == "cpu"


def test_per_epoch_evaluation_and_seeded_runs() -> None:
    recipe, train, val = _tiny(target=100.0, eval_every=None)
    first, again = (train_to_accuracy(recipe, train, val, CPU, seed=3) for _ in range(2))
    assert [e.step for e in first.curve] == [4, 8]  # after each epoch
    assert [e.accuracy for e in first.curve] == [e.accuracy for e in again.curve]
    for a, b in zip(first.model.parameters(), again.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_learning_rate_warms_up_then_decays_to_zero_at_the_cap() -> None:
    recipe, train, _ = _tiny(lr=0.4, warmup_epochs=1, max_epochs=3)
    trainer = Trainer(recipe, *train, CPU, seed=0)  # 4 steps an epoch
    lrs = [trainer.lr_at(step) for step in range(14)]
    assert lrs[:4] == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert lrs[7] == pytest.approx(0.2) and lrs[11] == pytest.approx(0.0)
    assert lrs[12:] == [0.0, 0.0]  # past the cap (a utilization run may go on)


def test_the_gpu_remedies_code_runs_on_the_cpu_too() -> None:
    """bf16 autocast, channels_last and the loops are the same lines on both devices (only
    the autocast device type differs): run them here on tiny data."""
    recipe, train, val = _tiny(bf16=True, channels_last=True)
    trainer = Trainer(recipe, *train, CPU, seed=0)
    first = trainer.run_epoch(0)
    assert first.images == 256 and math.isfinite(first.mean_loss)
    assert next(trainer.model.parameters()).is_contiguous(memory_format=torch.channels_last)
    assert 0 <= trainer.evaluate(*val) <= 100
    went_on = trainer.run_for(0.05)
    assert went_on.images >= recipe.batch_size and went_on.seconds >= 0.05


def test_pinned_memory_is_only_asked_for_with_a_gpu() -> None:
    recipe, train, _ = _tiny(pin_memory=True)
    assert Trainer(recipe, *train, CPU, seed=0).pin_memory is False


# -- input pipeline -----------------------------------------------------------------------------

def _epoch(loader, sampler, epoch: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    sampler.epoch = epoch
    return list(loader)


def test_batches_do_not_depend_on_the_number_of_workers() -> None:
    images, labels = _images(100), torch.arange(100)
    plain = make_loader(images, labels, 32, seed=1, augment=True)
    workers = make_loader(images, labels, 32, seed=1, augment=True, workers=2)
    for epoch in (0, 1):
        for (x0, y0), (x1, y1) in zip(_epoch(*plain, epoch), _epoch(*workers, epoch),
                                      strict=True):
            assert torch.equal(x0, x1) and torch.equal(y0, y1)


def test_an_epoch_is_a_permutation_cut_into_full_batches() -> None:
    images, labels = _images(100), torch.arange(100)
    loader, sampler = make_loader(images, labels, 32, seed=0, augment=False)
    first = _epoch(loader, sampler, 0)
    assert len(first) == 3 and all(len(y) == 32 for _, y in first)  # the last 4 dropped
    seen = torch.cat([y for _, y in first])
    assert len(set(seen.tolist())) == 96
    # Without augmentation a batch is the normalized images of its labels, in order.
    mean = torch.tensor((0.4914, 0.4822, 0.4465)).view(1, 3, 1, 1)
    std = torch.tensor((0.2470, 0.2435, 0.2616)).view(1, 3, 1, 1)
    x, y = first[0]
    assert torch.allclose(x, (images[y] - mean) / std)
    assert not torch.equal(seen, torch.cat([y for _, y in _epoch(loader, sampler, 1)]))


def test_augmentation_is_seeded_per_batch() -> None:
    images, labels = _images(64), torch.arange(64)
    a = _epoch(*make_loader(images, labels, 32, seed=0, augment=True), 0)
    b = _epoch(*make_loader(images, labels, 32, seed=0, augment=False), 0)
    c = _epoch(*make_loader(images, labels, 32, seed=1, augment=True), 0)
    assert torch.equal(a[0][1], b[0][1])  # augmentation leaves the order alone
    assert not torch.equal(a[0][0], b[0][0])
    assert not torch.equal(a[0][1], c[0][1])


def test_bad_batch_sizes_are_clear_errors() -> None:
    with pytest.raises(ValueError, match="batch size 200"):
        make_loader(_images(100), torch.arange(100), 200, seed=0, augment=False)
    with pytest.raises(ValueError, match="labels"):
        make_loader(_images(10), torch.arange(9), 2, seed=0, augment=False)


# -- models -------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(MODELS))
def test_models_classify_cifar_images(name: str) -> None:
    torch.manual_seed(0)
    model = build_model(name).eval()
    with torch.no_grad():
        assert model(_images(2)).shape == (2, 10)


def test_torchvision_resnets_keep_the_full_resolution_in_their_stem() -> None:
    model = build_model("resnet50")
    assert model.conv1.stride == (1, 1) and isinstance(model.maxpool, torch.nn.Identity)
    with pytest.raises(ValueError, match="unknown model"):
        build_model("vgg")


# -- the shifted test set -----------------------------------------------------------------------

def test_shifted_sets_are_deterministic_images_in_range() -> None:
    images = _images(8)
    first, second = shifted_test_sets(images), shifted_test_sets(images)
    assert list(first) == list(second) and len(first) == 4
    for name, shifted in first.items():
        assert torch.equal(shifted, second[name]), f"{name} is not deterministic"
        assert shifted.shape == images.shape and shifted.dtype == images.dtype
        assert 0 <= shifted.min() and shifted.max() <= 1
        assert not torch.equal(shifted, images), f"{name} left the images unchanged"


def test_noise_blur_and_contrast_on_known_images() -> None:
    flat = torch.full((2, 3, 32, 32), 0.5)
    assert torch.allclose(gaussian_blur(flat, 0.7), flat)  # blur keeps a constant image
    assert torch.equal(contrast(flat, 0.3), flat)
    images = _images(4)
    assert torch.allclose(contrast(images, 1.0), images)
    lowered = contrast(images, 0.4)
    assert torch.allclose(lowered.std(dim=(1, 2, 3)), 0.4 * images.std(dim=(1, 2, 3)))
    noisy = gaussian_noise(flat, 0.08)
    assert abs((noisy - flat).std().item() - 0.08) < 0.005
    assert torch.equal(noisy, gaussian_noise(flat, 0.08))
    # Blur lowers the pixel-to-pixel variation of noise; a larger sigma lowers it more.
    roughness = [(x[..., 1:] - x[..., :-1]).abs().mean().item()
                 for x in (images, gaussian_blur(images, 0.7), gaussian_blur(images, 1.5))]
    assert roughness[0] > roughness[1] > roughness[2]


def test_dct_is_orthonormal_and_tables_follow_the_quality() -> None:
    d = dct_matrix()
    assert torch.allclose(d @ d.T, torch.eye(8, dtype=torch.float64), atol=1e-12)
    assert quantization_tables(50)[0, 0, 0] == 16  # quality 50: the example table itself
    assert quantization_tables(100).max() == 1  # quality 100: no quantization step > 1
    assert (quantization_tables(10) >= quantization_tables(90)).all()
    with pytest.raises(ValueError, match="quality"):
        quantization_tables(0)


def test_jpeg_like_loses_more_at_lower_quality() -> None:
    images = gaussian_blur(_images(8), 1.0)  # photo-like: mostly low frequencies
    error = {q: (jpeg_like(images, q) - images).abs().mean().item() for q in (100, 90, 58, 10)}
    assert error[100] < 1.5 / 255  # only rounding to 8 bits and to integer coefficients
    assert error[100] < error[90] < error[58] < error[10]
    # A flat grey block is its DC coefficient alone: 8 * (100 - 128) = -224 = -14 steps of
    # quality 50's 16, so it comes back exactly.
    flat = torch.full((1, 3, 32, 32), 100 / 255)
    assert torch.allclose(jpeg_like(flat, 50), flat, atol=1e-6)
    with pytest.raises(ValueError, match="divisible by 8"):
        jpeg_like(torch.rand(1, 3, 30, 30), 50)


def test_photo_folders_are_read_by_class_name(tmp_path) -> None:
    g = torch.Generator().manual_seed(0)
    for name, size in (("cat", (40, 60)), ("ship", (32, 32)), ("ship", (64, 48))):
        folder = tmp_path / name
        folder.mkdir(exist_ok=True)
        pixels = torch.randint(0, 256, (*size, 3), dtype=torch.uint8, generator=g)
        Image.fromarray(pixels.numpy()).save(folder / f"{len(list(folder.iterdir()))}.png")
    (tmp_path / "cat" / "notes.txt").write_text("not an image")
    images, labels = load_image_folder(tmp_path)
    assert images.shape == (3, 3, 32, 32) and 0 <= images.min() and images.max() <= 1
    assert labels.tolist() == [CIFAR10_CLASSES.index("cat")] + [CIFAR10_CLASSES.index("ship")] * 2
    (tmp_path / "spaceship").mkdir()
    with pytest.raises(ValueError, match="spaceship"):
        load_image_folder(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_image_folder(tmp_path / "missing")


# -- remedies -----------------------------------------------------------------------------------

def test_gpu_remedies_are_listed_not_run_on_a_cpu() -> None:
    on_cpu = {r.name: why_not_run(r, "cpu", "quick") for r in REMEDIES}
    assert {n for n, why in on_cpu.items() if why == GPU_ONLY} == {
        "pinned memory + non_blocking", "bf16 autocast", "CUDA graphs"}
    assert on_cpu["torch.compile"] == FULL_ONLY
    compile_remedy = next(r for r in REMEDIES if r.name == "torch.compile")
    assert why_not_run(compile_remedy, "cpu", "full") is None
    assert all(why_not_run(r, "cuda", "full") is None for r in REMEDIES)


def test_both_compiled_remedies_run_in_the_full_profile_only() -> None:
    # CUDA graphs come through torch.compile(mode="reduce-overhead"): an Inductor compile on
    # every quick GPU run, as costly as torch.compile's.
    on_gpu_quick = {r.name: why_not_run(r, "cuda", "quick") for r in REMEDIES}
    assert {n for n, why in on_gpu_quick.items() if why == FULL_ONLY} == {
        "torch.compile", "CUDA graphs"}
    assert applied(RECIPES["resnet9-fast"], ALL, "cuda", "quick").compile == ""
    assert applied(RECIPES["resnet9-fast"], ALL, "cuda", "full").compile == "reduce-overhead"


def test_each_remedy_changes_one_thing_from_the_baseline() -> None:
    recipe = RECIPES["resnet9-fast"]
    plain = baseline(recipe)
    assert (plain.workers, plain.pin_memory, plain.channels_last, plain.bf16, plain.compile) == \
        (0, False, False, False, "")
    for remedy in REMEDIES[1:]:
        tuned = applied(recipe, remedy.name, "cuda", "full")
        changed = [f for f in Recipe.__dataclass_fields__
                   if getattr(tuned, f) != getattr(plain, f)]
        assert len(changed) == 1, f"{remedy.name} changed {changed}"
    everything = applied(recipe, ALL, "cuda", "full")
    assert (everything.pin_memory, everything.channels_last, everything.bf16,
            everything.compile) == (True, True, True, "reduce-overhead")
    assert everything.workers == min(8, os.cpu_count())  # never more workers than cores
    assert everything.batch_size == 4 * recipe.batch_size
    on_cpu = applied(recipe, ALL, "cpu", "quick")
    assert (on_cpu.workers, on_cpu.pin_memory, on_cpu.bf16, on_cpu.compile) == (
        min(2, os.cpu_count()), False, False, "")
    with pytest.raises(ValueError, match="unknown remedy"):
        applied(recipe, "overclocking", "cuda", "full")
