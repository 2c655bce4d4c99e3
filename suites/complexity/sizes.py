"""Batch sizes and resolutions per size profile, in one place.

quick must run the whole lab on a shared 2-core CPU in about two minutes: counting (parameters,
FLOPs, bytes) happens on the meta device at full 224 x 224 resolution and costs nothing, but
timed forward passes of the VGGs at 224 x 224 take seconds each there, so quick times the
ImageNet models at 112 x 112 (every timed row has an `image` column saying which). full is the
experiment as published: 224 x 224, realistic batches.
"""

from __future__ import annotations

from suites.complexity.models import CIFAR_RESNET18, image_size

MEMORY_MODELS = {"quick": [CIFAR_RESNET18, "resnet18", "resnet50"],
                 "full": [CIFAR_RESNET18, "resnet18", "resnet50", "vgg16", "vgg19"]}
MEMORY_BATCHES = {"quick": [2], "full": [32, 128]}
BYTES_BATCHES = {"quick": [1, 32], "full": [1, 32]}  # counted on meta: free in both profiles
TIMING_BATCHES = {"quick": [1, 2], "full": [1, 64]}  # PALEO: batch 1 and a larger batch
ROOFLINE_BATCH = {"quick": [2], "full": [64]}

QUICK_TIMING_IMAGE = 112


def timing_image_size(model: str, profile: str) -> int:
    """Resolution of timed forward passes (see the module docstring)."""
    native = image_size(model)
    return native if profile == "full" else min(native, QUICK_TIMING_IMAGE)
