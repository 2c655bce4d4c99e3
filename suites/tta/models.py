"""The lab's models: a small CNN for the quick profile, the small residual net of the fast
recipe, and torchvision's ResNet-18/50 with the usual CIFAR-10 stem.

The CIFAR stem (3x3 stride-1 first convolution, no max pool) keeps 32x32 images from being
shrunk to 8x8 before the first residual stage. suites/common will hold a shared CIFAR ResNet-18;
this lab builds its own from torchvision until then, so the two labs do not change together.
"""

from __future__ import annotations

import torch
import torchvision
from torch import nn

NUM_CLASSES = 10


def conv_bn(c_in: int, c_out: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU(inplace=True))


def small_cnn(width: int = 16) -> nn.Module:
    """Four layers on 8x8 inputs. The stand-in's class templates are 8x8 patterns upsampled to
    32x32, so a 4x4 average keeps their signal, divides the per-pixel noise by 4 and the FLOPs
    by 16: the quick profile trains to its target in about a second of one CPU core."""
    return nn.Sequential(
        nn.AvgPool2d(4),
        conv_bn(3, width), conv_bn(width, 2 * width), nn.MaxPool2d(2),
        conv_bn(2 * width, 2 * width), nn.AdaptiveMaxPool2d(1), nn.Flatten(),
        nn.Linear(2 * width, NUM_CLASSES),
    )


class Residual(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.body = nn.Sequential(conv_bn(channels, channels), conv_bn(channels, channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.body(x)


class Scale(nn.Module):
    def __init__(self, factor: float) -> None:
        super().__init__()
        self.factor = factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.factor


def resnet9() -> nn.Module:
    """Page's DAWNBench CIFAR-10 network (cifar10-fast): three stages of 128, 256 and 512
    channels, residual blocks after the first and the last, and logits scaled by 1/8 (which
    the recipe's learning rate assumes)."""
    return nn.Sequential(
        conv_bn(3, 64),
        conv_bn(64, 128), nn.MaxPool2d(2), Residual(128),
        conv_bn(128, 256), nn.MaxPool2d(2),
        conv_bn(256, 512), nn.MaxPool2d(2), Residual(512),
        nn.AdaptiveMaxPool2d(1), nn.Flatten(), nn.Linear(512, NUM_CLASSES, bias=False),
        Scale(0.125),
    )


def torchvision_cifar(name: str) -> nn.Module:
    """torchvision's ResNet-18 or ResNet-50 for 32x32 images and 10 classes."""
    model = getattr(torchvision.models, name)(weights=None, num_classes=NUM_CLASSES)
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


MODELS = {
    "small_cnn": small_cnn,
    "resnet9": resnet9,
    "resnet18": lambda: torchvision_cifar("resnet18"),
    "resnet50": lambda: torchvision_cifar("resnet50"),
}


def build_model(name: str) -> nn.Module:
    """A freshly initialized model (from the current torch seed), on the CPU."""
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(MODELS)}")
    return MODELS[name]()
