"""The lab's models, all built by torchvision (nothing re-implemented), and their parameter counts.

``resnet18_cifar`` is the CIFAR-10 adaptation of torchvision's ResNet-18 that the other labs
train; it is defined once, in suites/common/models.py.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torchvision
from torch import nn

from suites.common.models import resnet18_cifar

IMAGENET_MODELS: tuple[str, ...] = ("resnet18", "resnet50", "vgg16", "vgg19")
CIFAR_RESNET18 = "resnet18_cifar"
ALL_MODELS: tuple[str, ...] = (*IMAGENET_MODELS, CIFAR_RESNET18)
#: The networks of Lu et al.'s timing tables (AlexNet: Table 2, VGG-16: 3, GoogLeNet: 5,
#: ResNet-50: 6), which the PALEO problem of shared/seeds 003 asks about.
PALEO_MODELS: tuple[str, ...] = ("alexnet", "vgg16", "googlenet", "resnet50")
#: Every model the lab builds.
KNOWN_MODELS: tuple[str, ...] = tuple(dict.fromkeys((*ALL_MODELS, *PALEO_MODELS)))

BYTES_PER_FP32 = 4


def build_model(name: str, device: torch.device | str = "cpu") -> nn.Module:
    """A freshly initialised model (no weight download). ``device="meta"`` builds shapes only,
    which is all that parameter, FLOP and byte counting need."""
    if name not in KNOWN_MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(KNOWN_MODELS)}")
    with torch.device(device):
        if name == CIFAR_RESNET18:
            return resnet18_cifar()
        if name == "googlenet":
            # As published (6.6 M parameters): without the two auxiliary classifiers, which
            # only training uses; its own initialisation asked for, not warned about.
            return torchvision.models.googlenet(weights=None, aux_logits=False,
                                                init_weights=True)
        return getattr(torchvision.models, name)(weights=None)


def image_size(name: str) -> int:
    """The input resolution each model was designed for."""
    return 32 if name == CIFAR_RESNET18 else 224


def num_classes(name: str) -> int:
    return 10 if name == CIFAR_RESNET18 else 1000


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def parameter_bytes(model: nn.Module) -> int:
    """Theoretical parameter memory: every parameter stored once at its dtype's size."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def basic_block_resnet_parameters(
    stem_kernel: int,
    classes: int,
    blocks_per_stage: Sequence[int] = (2, 2, 2, 2),
    widths: Sequence[int] = (64, 128, 256, 512),
    in_channels: int = 3,
) -> int:
    """Closed-form parameter count of a BasicBlock ResNet (He et al. 2016, option B shortcuts).

    Derived from the architecture on paper, not from a model object, so it independently checks
    what torchvision builds. Convolutions have no bias; each BatchNorm has a weight and a bias
    (running statistics are buffers, not parameters).
    """

    def conv_bn(c_in: int, c_out: int, k: int) -> int:
        return c_in * c_out * k * k + 2 * c_out

    total = conv_bn(in_channels, widths[0], stem_kernel)
    c_in = widths[0]
    for stage, (width, blocks) in enumerate(zip(widths, blocks_per_stage, strict=True)):
        for block in range(blocks):
            total += conv_bn(c_in, width, 3) + conv_bn(width, width, 3)
            strided = stage > 0 and block == 0
            if strided or c_in != width:
                total += conv_bn(c_in, width, 1)  # 1x1 projection shortcut
            c_in = width
    return total + c_in * classes + classes  # fully connected layer with bias
