"""A second test set the models were not tuned on: the test images under a distribution shift.

The lab scored its models on 50 labelled photos "from the wild". With no downloads, the shift
here is built from the test images themselves, in the spirit of CIFAR-10-C (Hendrycks and
Dietterich, 2019): four corruption families, each at one fixed, middling severity, made
deterministically (the noise from a fixed seed) so every run and every model sees the same
images. A folder of your own labelled photos can be added: HPML_TTA_WILD_IMAGES=DIR, with one
sub-folder per CIFAR-10 class (DIR/cat/*.jpg, ...).

All functions take and return (N, 3, H, W) float images in [0, 1].
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F

WILD_IMAGES_ENV = "HPML_TTA_WILD_IMAGES"
CIFAR10_CLASSES = ("airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse",
                   "ship", "truck")
NOISE_SEED = 2019


def gaussian_noise(images: torch.Tensor, std: float, seed: int = NOISE_SEED) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    noise = torch.randn(images.shape, generator=g).to(images.device)
    return (images + std * noise).clamp(0.0, 1.0)


def gaussian_blur(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian filter, radius ceil(3 sigma), edges reflected."""
    radius = max(1, math.ceil(3 * sigma))
    x = torch.arange(-radius, radius + 1, dtype=images.dtype, device=images.device)
    kernel = torch.exp(-x ** 2 / (2 * sigma ** 2))
    kernel = kernel / kernel.sum()
    channels = images.shape[1]
    out = F.pad(images, (radius, radius, radius, radius), mode="reflect")
    out = F.conv2d(out, kernel.view(1, 1, 1, -1).expand(channels, 1, 1, -1), groups=channels)
    out = F.conv2d(out, kernel.view(1, 1, -1, 1).expand(channels, 1, -1, 1), groups=channels)
    return out.clamp(0.0, 1.0)


def contrast(images: torch.Tensor, factor: float) -> torch.Tensor:
    """Pull every pixel toward its image's mean: factor 1 keeps the image, 0 makes it flat."""
    mean = images.mean(dim=(1, 2, 3), keepdim=True)
    return ((images - mean) * factor + mean).clamp(0.0, 1.0)


# JPEG's example quantization tables (ITU T.81, Annex K), luminance and chrominance.
_LUMA = [16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
         14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
         18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
         49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99]
_CHROMA = [17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99,
           24, 26, 56, 99, 99, 99, 99, 99, 47, 66, 99, 99, 99, 99, 99, 99] + [99] * 32
_YCBCR = torch.tensor([[0.299, 0.587, 0.114],
                       [-0.168736, -0.331264, 0.5],
                       [0.5, -0.418688, -0.081312]], dtype=torch.float64)


def quantization_tables(quality: int) -> torch.Tensor:
    """(3, 8, 8) tables for Y, Cb, Cr at a JPEG quality in [1, 100] (the IJG scaling)."""
    if not 1 <= quality <= 100:
        raise ValueError(f"JPEG quality must be in [1, 100], got {quality}")
    scale = 5000 / quality if quality < 50 else 200 - 2 * quality
    tables = []
    for base in (_LUMA, _CHROMA, _CHROMA):
        t = torch.floor((torch.tensor(base, dtype=torch.float64) * scale + 50) / 100)
        tables.append(t.clamp(1, 255).view(8, 8))
    return torch.stack(tables)


def dct_matrix(n: int = 8) -> torch.Tensor:
    """Orthonormal DCT-II: coefficients = D @ block @ D.T, and block = D.T @ coeffs @ D."""
    k = torch.arange(n, dtype=torch.float64).view(-1, 1)
    i = torch.arange(n, dtype=torch.float64).view(1, -1)
    d = torch.cos(math.pi * (2 * i + 1) * k / (2 * n)) * math.sqrt(2 / n)
    d[0] /= math.sqrt(2)
    return d


def jpeg_like(images: torch.Tensor, quality: int) -> torch.Tensor:
    """JPEG's lossy step without the entropy coding: YCbCr, 8x8 block DCT, coefficients
    rounded to the quality's quantization tables, and back to 8-bit RGB. (No chroma
    subsampling: at 32x32 it would halve the colour resolution on top of the quantization.)"""
    n, c, h, w = images.shape
    if c != 3 or h % 8 or w % 8:
        raise ValueError(f"JPEG-like quantization takes RGB images with sides divisible by 8, "
                         f"got shape {tuple(images.shape)}")
    x = images.to(torch.float64) * 255
    ycbcr = torch.einsum("ij,njhw->nihw", _YCBCR.to(x.device), x)
    ycbcr[:, 1:] += 128
    blocks = (ycbcr - 128).view(n, 3, h // 8, 8, w // 8, 8).permute(0, 1, 2, 4, 3, 5)
    d = dct_matrix().to(x.device)
    q = quantization_tables(quality).to(x.device).view(1, 3, 1, 1, 8, 8)
    coefficients = torch.round(d @ blocks @ d.T / q) * q
    blocks = d.T @ coefficients @ d
    ycbcr = blocks.permute(0, 1, 2, 4, 3, 5).reshape(n, 3, h, w) + 128
    ycbcr[:, 1:] -= 128
    rgb = torch.einsum("ij,njhw->nihw", torch.linalg.inv(_YCBCR).to(x.device), ycbcr)
    return (rgb.round().clamp(0, 255) / 255).to(images.dtype)


#: The shifted test set: one severity per family, of the order of CIFAR-10-C's middle one
#: (severity 3 of 5), chosen here rather than copied from it.
CORRUPTIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gaussian noise (std 0.08)": lambda x: gaussian_noise(x, 0.08),
    "gaussian blur (sigma 0.7)": lambda x: gaussian_blur(x, 0.7),
    "contrast (x0.4)": lambda x: contrast(x, 0.4),
    "JPEG-like (quality 58)": lambda x: jpeg_like(x, 58),
}


def shifted_test_sets(images: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every corruption of the test images; the labels are the test labels, in order."""
    return {name: corrupt(images) for name, corrupt in CORRUPTIONS.items()}


def load_image_folder(root: Path | str, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Labelled photos in root/<CIFAR-10 class>/*: each centre-cropped to a square and resized
    to size x size. Returns images (N, 3, size, size) in [0, 1] and labels (N,)."""
    import numpy as np
    from PIL import Image
    from torchvision.transforms.v2.functional import center_crop, resize

    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{WILD_IMAGES_ENV}={root}: no such folder")
    unknown = [p.name for p in root.iterdir() if p.is_dir() and p.name not in CIFAR10_CLASSES]
    if unknown:
        raise ValueError(f"{root}: sub-folders must be CIFAR-10 classes "
                         f"({', '.join(CIFAR10_CLASSES)}); found {', '.join(sorted(unknown))}")
    images, labels = [], []
    for label, name in enumerate(CIFAR10_CLASSES):
        for path in sorted((root / name).glob("*")) if (root / name).is_dir() else []:
            if path.suffix.lower() not in (".png", ".jpg", ".jpeg"):
                continue
            with Image.open(path) as photo:
                image = torch.from_numpy(np.asarray(photo.convert("RGB")).copy())
            image = image.permute(2, 0, 1)  # (H, W, 3) -> (3, H, W)
            side = min(image.shape[1:])
            image = resize(center_crop(image, [side, side]), [size, size], antialias=True)
            images.append(image.float() / 255)
            labels.append(label)
    if not images:
        raise ValueError(f"{root}: no .png or .jpg images in any class sub-folder")
    return torch.stack(images), torch.tensor(labels, dtype=torch.int64)


def wild_images_folder() -> Path | None:
    """The user's folder of labelled photos, if HPML_TTA_WILD_IMAGES names one."""
    value = os.environ.get(WILD_IMAGES_ENV)
    return Path(value).expanduser() if value else None
