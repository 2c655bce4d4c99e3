"""The lab's shared state: data, the trained fp32 reference, calibration inputs, and the
measurements every step reports (accuracy, size, per-layer output error against fp32).

Configuration is plain values per size profile. quick: a few thousand synthetic images, seconds
of CPU training. full: real CIFAR-10 (from the data root) trained to the usual ~60 %+."""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import torch

from suites.common.data import load_cifar10

from .cnn import LAYERS, CifarCNN, accuracy, normalize, parameter_bytes, train_cnn

EXPERIMENT = "int8 post-training quantization"

PROFILES = {
    # triton_images: test images the interpreted Triton kernel runs in step e (~20 ms of
    # interpreter overhead per program instance makes the whole test set minutes long).
    "quick": dict(train_images=4096, test_images=1000, epochs=5, batch_size=128, lr=3e-3,
                  calibration_images=256, error_images=256, triton_images=128),
    "full": dict(train_images=None, test_images=None, epochs=10, batch_size=64, lr=1e-3,
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
    settings: dict

    def error_images(self, limit: int | None = None) -> torch.Tensor:
        """The test images on which per-layer output errors are measured."""
        n = self.settings["error_images"]
        return self.test_images[:n if limit is None else min(n, limit)]

    def calibration_batches(self, batch_size: int = 256) -> list[torch.Tensor]:
        return list(self.calibration_images.split(batch_size))



@contextlib.contextmanager
def _single_thread_on_cpu(device: torch.device) -> Iterator[None]:
    """The quick profile shares 2 cores with other workers; two intra-op threads there run
    ~5x slower than one (oversubscription), so CPU training uses one thread."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def build_lab(profile: str, data_root: Path | None, download: bool) -> QuantizationLab:
    settings = PROFILES[profile]
    train = load_cifar10("train", data_root, download, limit=settings["train_images"])
    test = load_cifar10("test", data_root, download, limit=settings["test_images"])
    train_images = normalize(train.images)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    with _single_thread_on_cpu(device):
        model = train_cnn(train_images, train.labels, epochs=settings["epochs"],
                          batch_size=settings["batch_size"], lr=settings["lr"], seed=SEED,
                          device=device)
        test_images = normalize(test.images)
        fp32 = accuracy(model, test_images, test.labels)
    return QuantizationLab(
        profile=profile, source=train.source, synthetic=train.synthetic,
        test_images=test_images, test_labels=test.labels,
        calibration_images=train_images[:settings["calibration_images"]],
        model=model, fp32_accuracy=fp32, settings=settings)


def record_variant(hpml, lab: QuantizationLab, step: str, variant: str,
                   forward: Callable[[torch.Tensor], torch.Tensor],
                   layer_outputs: Callable[[torch.Tensor], dict[str, torch.Tensor]],
                   size_bytes: int, images: torch.Tensor | None = None,
                   labels: torch.Tensor | None = None, error_images: int | None = None,
                   **columns) -> dict[str, float]:
    """One summary-table row (accuracy, its drop from fp32 on the same images, size) plus a
    row per layer with the max and mean |output - fp32 output| on the first test images
    (at most `error_images` of them). Returns the accuracies and errors measured."""
    images = lab.test_images if images is None else images
    labels = lab.test_labels if labels is None else labels
    hpml.experiment = EXPERIMENT
    hpml.param(step=step, variant=variant, data=lab.source, test_images=len(images), **columns)
    acc = accuracy(forward, images, labels)
    fp32_acc = (lab.fp32_accuracy if len(images) == len(lab.test_images)
                else accuracy(lab.model, images, labels))
    hpml.record("accuracy", acc, unit="%", better="higher")
    hpml.record("accuracy_drop", fp32_acc - acc, unit="%", better="lower",
                note="accuracy drop: fp32 minus the variant, on the same test images")
    hpml.record("size", size_bytes, unit="B", better="lower")
    measured = {"accuracy": acc, "fp32_accuracy": fp32_acc}
    probe = lab.error_images(error_images)
    with torch.no_grad():
        reference = lab.model.layer_outputs(probe)
        outputs = layer_outputs(probe)
    for name in LAYERS:
        error = (outputs[name].float().cpu() - reference[name]).abs()
        if not torch.isfinite(error).all():
            raise AssertionError(f"{step}/{variant}: layer {name} output has NaN or Inf")
        with hpml.row(layer=name) as row:
            row.record("max_abs_error", error.max().item(), better="lower")
            row.record("mean_abs_error", error.mean().item(), better="lower")
        measured[f"{name}.max"] = error.max().item()
        measured[f"{name}.mean"] = error.mean().item()
    return measured


def fp32_size(lab: QuantizationLab) -> int:
    return parameter_bytes(lab.model)
