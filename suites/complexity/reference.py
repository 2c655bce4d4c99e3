"""Published reference figures (not measured here).

Every number in this module is copied from a public document and is only ever shown beside the
figure this suite measures, or used as the expected value of a check. Nothing measured is stored
here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PublishedModel:
    """torchvision's documented figures for the ImageNet weights of one architecture."""

    parameters: int
    # torchvision's "GFLOPS" column counts multiply-adds (one MAC = one "FLOP" there), i.e. half
    # the FLOPs that torch.utils.flop_counter reports for the same convolutions and matmuls.
    gmacs: float


# Source: torchvision model documentation, "Table of all available classification weights"
# (https://pytorch.org/vision/stable/models.html), columns "Params" and "GFLOPS", for
# ResNet18_Weights.IMAGENET1K_V1, ResNet50_Weights.IMAGENET1K_V1, VGG16_Weights.IMAGENET1K_V1,
# VGG19_Weights.IMAGENET1K_V1, GoogLeNet_Weights.IMAGENET1K_V1 (num_params 6624904, GFLOPS
# 1.50) and AlexNet_Weights.IMAGENET1K_V1 (num_params 61100840, GFLOPS 0.71) (224 x 224).
TORCHVISION_DOCS = "torchvision model documentation, table of classification weights"
TORCHVISION_PUBLISHED: dict[str, PublishedModel] = {
    "resnet18": PublishedModel(parameters=11_689_512, gmacs=1.814),
    "resnet50": PublishedModel(parameters=25_557_032, gmacs=4.089),
    "vgg16": PublishedModel(parameters=138_357_544, gmacs=15.47),
    "vgg19": PublishedModel(parameters=143_667_240, gmacs=19.632),
    "googlenet": PublishedModel(parameters=6_624_904, gmacs=1.50),
    "alexnet": PublishedModel(parameters=61_100_840, gmacs=0.71),
}

# Source: NVIDIA Tesla K80 datasheet (with GPU Boost), the figures the PALEO lab asks for.
# FLOP/s, both GPUs of the board together, as published; never measured here.
K80_DATASHEET = "NVIDIA Tesla K80 datasheet (with GPU Boost)"
K80_PUBLISHED_PEAK_FLOPS: dict[str, float] = {
    "fp32": 8.74e12,
    "fp64": 2.91e12,
}

# Lu et al. 2017 report that convolutions take about 99 % of VGG-16's forward FLOPs; the lab
# asks whether VGG-19 shows the same.
LU_ET_AL = "Lu et al. 2017, VGG-16 (the lab's handout)"
LAB_EXPECTED_VGG_CONV_SHARE = 0.99
