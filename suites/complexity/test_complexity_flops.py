"""Q3: FLOPs of a forward pass and of forward + backward, per layer type; VGG-19's conv share.

Counted by torch.utils.flop_counter on the meta device at 224 x 224 (32 x 32 for the CIFAR
ResNet-18), batch 1: the figures torchvision publishes are per image.
"""

import pytest
import torch

from suites.complexity.flops import count_forward_flops, count_training_flops
from suites.complexity.models import ALL_MODELS, IMAGENET_MODELS, build_model, image_size
from suites.complexity.reference import (
    LAB_EXPECTED_VGG_CONV_SHARE,
    LU_ET_AL,
    TORCHVISION_DOCS,
    TORCHVISION_PUBLISHED,
)

pytestmark = pytest.mark.complexity


def _one_image(model: str) -> torch.Tensor:
    size = image_size(model)
    return torch.empty(1, 3, size, size, device="meta")


@pytest.mark.parametrize("model", ALL_MODELS)
def test_forward_and_training_flops(hpml, model: str) -> None:
    hpml.experiment = "FLOPs per image (torch.utils.flop_counter)"
    forward = count_forward_flops(build_model(model, "meta"), _one_image(model))
    training = count_training_flops(build_model(model, "meta"), _one_image(model))
    hpml.record("forward_flops", forward.total, unit="FLOP", better=None, exact=True)
    hpml.record("train_flops", training.total, unit="FLOP", note="forward + backward",
                better=None, exact=True)
    hpml.record("train_over_forward", training.total / forward.total, better=None, exact=True)
    for layer_type in sorted(forward.by_layer_type):
        if not training.by_layer_type[layer_type]:
            continue  # BatchNorm, ReLU, pooling: flop_counter counts no elementwise work
        with hpml.row(layer_type=layer_type) as row:
            row.record("forward_flops", forward.by_layer_type[layer_type], unit="FLOP",
                       better=None, exact=True)
            row.record("train_flops", training.by_layer_type[layer_type], unit="FLOP",
                       better=None, exact=True)
            row.record("forward_share", 100 * forward.share(layer_type), unit="%",
                       better=None, exact=True)

    # Every counted FLOP happens inside some layer.
    assert sum(forward.by_layer.values()) == forward.total
    assert sum(training.by_layer.values()) == training.total
    # Backward costs about twice the forward (input and weight gradients), less for the first
    # layer, which needs no input gradient.
    assert 2.5 < training.total / forward.total <= 3.0

    if model in IMAGENET_MODELS:
        published = TORCHVISION_PUBLISHED[model].gmacs
        ours = forward.total / 2 / 1e9  # torchvision counts a multiply-add once
        hpml.record("gmacs", ours, note="forward FLOPs / 2 / 1e9", better=None, exact=True)
        hpml.reference("published_gmacs", published, source=TORCHVISION_DOCS)
        hpml.record("rel_diff_vs_published", 100 * abs(ours - published) / published, unit="%",
                    better="lower")
        assert abs(ours - published) / published < 0.01


def test_vgg19_convolution_share_of_forward_flops(hpml) -> None:
    hpml.experiment = "VGG-19 forward FLOPs per layer"
    forward = count_forward_flops(build_model("vgg19", "meta"), _one_image("vgg19"))
    for layer, flops in forward.by_layer.items():
        if flops:  # ReLU, pooling and dropout do no counted arithmetic
            with hpml.row(layer=layer, layer_type=forward.layer_types[layer]) as row:
                row.record("forward_flops", flops, unit="FLOP", better=None, exact=True)
                row.record("share", 100 * flops / forward.total, unit="%", better=None, exact=True)
    conv_share = forward.share("Conv2d")
    hpml.record("conv_share", 100 * conv_share, unit="%", better=None, exact=True)
    hpml.reference("lab_expected_conv_share", 100 * LAB_EXPECTED_VGG_CONV_SHARE, unit="%",
                   source=LU_ET_AL)
    weight_layers = [n for n, t in forward.layer_types.items() if t in ("Conv2d", "Linear")]
    assert len(weight_layers) == 19  # 16 convolutions + 3 fully connected: the "19"
    assert forward.by_layer_type["Conv2d"] + forward.by_layer_type["Linear"] == forward.total
    assert abs(conv_share - LAB_EXPECTED_VGG_CONV_SHARE) < 0.01
