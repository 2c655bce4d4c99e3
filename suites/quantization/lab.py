"""The lab's shared state: data, the trained fp32 reference, calibration inputs, and the
measurements every step reports (accuracy, size, per-layer output error against fp32).

Configuration is a Scale per size profile. quick: a few thousand synthetic images, seconds of
CPU training. full: real CIFAR-10 (from the data root) trained to the usual ~60 %+."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from pytest_hpml import Hpml
from suites.common.data import load_cifar10
from suites.common.threads import one_cpu_thread
from suites.quantization.cnn import (
    LAYERS,
    CifarCNN,
    accuracy,
    normalize,
    parameter_bytes,
    train_cnn,
)

EXPERIMENT = "int8 post-training quantization"

@dataclass(frozen=True)
class Scale:
    """The lab at one size profile."""

    train_images: int | None  # None: the whole split
    test_images: int | None
    epochs: int
    batch_size: int
    lr: float
    calibration_images: int
    error_images: int  # test images the per-layer output errors are measured on
    # Test images the Triton kernel runs in step e (None: all): under the interpreter, ~20 ms
    # of Python per program instance makes the whole test set minutes long.
    triton_images: int | None


SCALES = {
    "quick": Scale(train_images=4096, test_images=1000, epochs=5, batch_size=128, lr=3e-3,
                   calibration_images=256, error_images=256, triton_images=128),
    "full": Scale(train_images=None, test_images=None, epochs=10, batch_size=64, lr=1e-3,
                  calibration_images=1000, error_images=1000, triton_images=None),
}
SEED = 0


@dataclass
class QuantizationLab:
    profile: str
    source: str              # "CIFAR-10" or "synthetic-CIFAR-10": every row says which
    synthetic: bool
    test_images: torch.Tensor  # normalized to [-1, 1]
    test_labels: torch.Tensor
    calibration_images: torch.Tensor  # from the training split, never the test split
    model: CifarCNN          # the fp32 reference, eval mode, CPU
    fp32_accuracy: float
    scale: Scale

    def error_images(self, limit: int | None = None) -> torch.Tensor:
        """The test images on which per-layer output errors are measured."""
        n = self.scale.error_images
        return self.test_images[:n if limit is None else min(n, limit)]

    def calibration_batches(self, batch_size: int = 256) -> list[torch.Tensor]:
        return list(self.calibration_images.split(batch_size))


def build_lab(profile: str, data_root: Path | None, download: bool,
              device: torch.device) -> QuantizationLab:
    """Data, and the fp32 reference trained on `device` (the test's hpml.device)."""
    scale = SCALES[profile]
    train = load_cifar10("train", data_root, download, limit=scale.train_images)
    test = load_cifar10("test", data_root, download, limit=scale.test_images)
    train_images = normalize(train.images)
    with one_cpu_thread(device):
        model = train_cnn(train_images, train.labels, epochs=scale.epochs,
                          batch_size=scale.batch_size, lr=scale.lr, seed=SEED,
                          device=device)
        test_images = normalize(test.images)
        fp32 = accuracy(model, test_images, test.labels)
    return QuantizationLab(
        profile=profile, source=train.source, synthetic=train.synthetic,
        test_images=test_images, test_labels=test.labels,
        calibration_images=train_images[:scale.calibration_images],
        model=model, fp32_accuracy=fp32, scale=scale)


@dataclass
class Variant:
    """One row of the summary table: a quantized (or the fp32) model and how it is stored."""

    step: str  # "b: int8 weights", ...
    name: str  # the variant within the step: "per-channel", "max", ...
    forward: Callable[[torch.Tensor], torch.Tensor]  # images -> logits
    layer_outputs: Callable[[torch.Tensor], dict[str, torch.Tensor]]
    size_bytes: int  # stored size: weights, scales, biases
    columns: dict[str, str] = field(default_factory=dict)  # gemm=..., weights=...


@dataclass
class Measurement:
    accuracy: float  # % on the test images it was scored on
    fp32_accuracy: float  # the fp32 reference on the same images
    test_images: int
    layer_errors: dict[str, tuple[float, float]]  # layer -> (max, mean) |output - fp32 output|

    @property
    def drop(self) -> float:
        return self.fp32_accuracy - self.accuracy


def measure_variant(lab: QuantizationLab, variant: Variant, images: torch.Tensor | None = None,
                    labels: torch.Tensor | None = None,
                    error_images: int | None = None) -> Measurement:
    """Accuracy (and the fp32 model's on the same images), and per layer the max and mean
    |output - fp32 output| on the first test images (at most `error_images` of them)."""
    images = lab.test_images if images is None else images
    labels = lab.test_labels if labels is None else labels
    acc = accuracy(variant.forward, images, labels)
    fp32_acc = (lab.fp32_accuracy if len(images) == len(lab.test_images)
                else accuracy(lab.model, images, labels))
    probe = lab.error_images(error_images)
    with torch.no_grad():
        reference = lab.model.layer_outputs(probe)
        outputs = variant.layer_outputs(probe)
    errors = {}
    for name in LAYERS:
        error = (outputs[name].float().cpu() - reference[name].cpu()).abs()
        if not torch.isfinite(error).all():
            raise AssertionError(f"{variant.step}/{variant.name}: layer {name} output has NaN "
                                 "or Inf")
        errors[name] = (error.max().item(), error.mean().item())
    return Measurement(acc, fp32_acc, len(images), errors)


def step_experiment(step: str) -> str:
    """The table of one step ("b: int8 weights" -> "int8 post-training quantization, step b:
    int8 weights"): each step's rows and columns apart, not one table 16 columns wide."""
    return f"{EXPERIMENT}, step {step}" if step[1:2] == ":" else f"{EXPERIMENT}, {step}"


def record_variant(hpml: Hpml, lab: QuantizationLab, variant: Variant,
                   measured: Measurement, name_column: bool = True) -> None:
    """The variant's summary row (accuracy, drop from fp32, size) and a row per layer, in the
    table of its step. name_column=False: the test's own parameter (weights=, calibration=)
    already names the variant."""
    hpml.experiment = step_experiment(variant.step)
    if name_column:
        hpml.param(variant=variant.name)
    hpml.param(data=lab.source, test_images=measured.test_images, **variant.columns)
    hpml.record("accuracy", measured.accuracy, unit="%", better="higher")
    hpml.record("accuracy_drop", measured.drop, unit="%", better="lower",
                note="accuracy drop: fp32 minus the variant, on the same test images")
    hpml.record("size", variant.size_bytes, unit="B", better="lower")
    for name, (largest, mean) in measured.layer_errors.items():
        with hpml.row(layer=name) as row:
            row.record("max_abs_error", largest, better="lower")
            row.record("mean_abs_error", mean, better="lower")


def fp32_variant(lab: QuantizationLab) -> Variant:
    return Variant("fp32 reference", "fp32", lab.model, lab.model.layer_outputs,
                   parameter_bytes(lab.model))
