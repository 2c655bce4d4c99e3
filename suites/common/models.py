"""Models shared by the labs: the CIFAR-10 ResNet-18, at full width or narrower.

``resnet18_cifar()`` is the usual CIFAR-10 adaptation of torchvision's ResNet-18 (He et al.
2016): 10 classes, a 3x3 stride-1 first convolution instead of the 7x7 stride-2 one, and no max
pool, so that 32x32 images are not shrunk to 8x8 before the first residual stage. At the default
width (64) it is torchvision's model with those two layers swapped: 11,173,962 parameters.

``resnet18_cifar(width=w)`` keeps the architecture (2-2-2-2 BasicBlocks, stage widths w, 2w, 4w,
8w) with fewer channels, for a quick profile that must train in seconds on a CPU. torchvision's
BasicBlock refuses a base width other than 64, but that is ResNet's ``width_per_group``, not the
plane count: torchvision's own ``ResNet._make_layer`` builds the narrow stages when ``inplanes``
starts at w, so the blocks, shortcuts and initialization are still torchvision's.
"""

from __future__ import annotations

import contextlib

import torch
import torchvision
from torch import nn
from torchvision.models.resnet import BasicBlock

FULL_WIDTH = 64
CIFAR10_CLASSES = 10
#: torchvision's ResNet-18 with the CIFAR stem (checked against a closed form in suites/complexity).
RESNET18_CIFAR_PARAMETERS = 11_173_962


def _cifar_stem(model: torchvision.models.ResNet, width: int) -> None:
    model.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
    # As ResNet.__init__ initializes every convolution (the new stem missed that loop).
    nn.init.kaiming_normal_(model.conv1.weight, mode="fan_out", nonlinearity="relu")
    model.maxpool = nn.Identity()


def _narrow_resnet18(width: int, num_classes: int) -> torchvision.models.ResNet:
    # The full-width model is built on the meta device (no memory, no init work) and every
    # module that holds parameters is replaced; only its structure and methods are kept.
    with torch.device("meta"):
        model = torchvision.models.resnet18(weights=None, num_classes=num_classes)
    model.inplanes = width
    _cifar_stem(model, width)
    model.bn1 = nn.BatchNorm2d(width)
    model.layer1 = model._make_layer(BasicBlock, width, 2)
    model.layer2 = model._make_layer(BasicBlock, 2 * width, 2, stride=2)
    model.layer3 = model._make_layer(BasicBlock, 4 * width, 2, stride=2)
    model.layer4 = model._make_layer(BasicBlock, 8 * width, 2, stride=2)
    model.fc = nn.Linear(8 * width, num_classes)
    # torchvision's ResNet initialization (ResNet.__init__), which the new modules missed.
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.constant_(m.weight, 1)
            nn.init.constant_(m.bias, 0)
    return model


def resnet18_cifar(width: int = FULL_WIDTH, num_classes: int = CIFAR10_CLASSES,
                   device: torch.device | str | None = None) -> nn.Module:
    """ResNet-18 for 32x32 images; ``width`` is the first stage's channel count (64: the
    published model). ``device="meta"`` builds shapes only."""
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ValueError(f"width must be a positive int (64 is the published ResNet-18), "
                         f"got {width!r}")
    # No device given: the caller's default device (a `with torch.device(...)` block) holds.
    with torch.device(device) if device is not None else contextlib.nullcontext():
        if width == FULL_WIDTH:
            model = torchvision.models.resnet18(weights=None, num_classes=num_classes)
            _cifar_stem(model, width)
            return model
        return _narrow_resnet18(width, num_classes)
