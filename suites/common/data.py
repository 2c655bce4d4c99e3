"""MNIST, Fashion-MNIST and CIFAR-10 for the labs: the real ones when present, else a learnable
stand-in.

Real data comes through torchvision.datasets from the data root (downloaded only when asked).
Fashion-MNIST (Zalando's clothing images) has MNIST's format exactly, 28 x 28 grey levels in 10
classes, 60000 + 10000 images, so it is a drop-in for an MNIST lab where MNIST itself is not at
hand; it is harder (a linear model reaches about 84 % on it, against 92 % on MNIST), so its
figures are its own and never compared with published MNIST ones.
The stand-in has the same shapes and 10 classes: each class is a smooth random template,
shifted by a few pixels and buried in noise. For MNIST the template is "ink" on a black
background, as digits are; for CIFAR-10 it is a faint pattern over mid-grey, fainter because
three channels carry more signal. Models learn it, but not instantly (the lab CNN reaches about
60 % in a few epochs, the sigmoid MLP needs several epochs to leave chance), so accuracy still
separates good variants from bad ones. It is never a published figure, and records say which
data they used.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

SHAPES = {"MNIST": (1, 28, 28), "FashionMNIST": (1, 28, 28), "CIFAR-10": (3, 32, 32)}
SIZES = {"train": {"MNIST": 60_000, "FashionMNIST": 60_000, "CIFAR-10": 50_000},
         "test": {"MNIST": 10_000, "FashionMNIST": 10_000, "CIFAR-10": 10_000}}
NUM_CLASSES = 10
# (ink threshold or None for grey, template amplitude, noise stdev, max shift in pixels):
# chosen by training the labs' own models on them, so that neither set is trivially learned.
DIFFICULTY = {"MNIST": (0.5, 1.0, 0.4, 3), "CIFAR-10": (None, 0.2, 0.4, 3)}
DIFFICULTY["FashionMNIST"] = DIFFICULTY["MNIST"]  # the same kind of stand-in: grey on black
# Where torchvision looks under the data root: <root>/<folder>/raw/ for the MNIST formats.
TORCHVISION = {"MNIST": "MNIST", "FashionMNIST": "FashionMNIST", "CIFAR-10": "CIFAR10"}


@dataclass
class LabData:
    images: torch.Tensor  # (N, C, H, W) float32 in [0, 1]
    labels: torch.Tensor  # (N,) int64
    name: str  # "MNIST" | "FashionMNIST" | "CIFAR-10"
    split: str  # "train" | "test"
    synthetic: bool

    @property
    def source(self) -> str:
        return f"synthetic-{self.name}" if self.synthetic else self.name

    def __len__(self) -> int:
        return self.labels.numel()

    def flat(self) -> torch.Tensor:
        """(N, C*H*W): the MLP's view of the images."""
        return self.images.reshape(len(self), -1)


def _check_split(split: str) -> None:
    if split not in ("train", "test"):
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")


def synthetic(name: str, split: str, n: int | None = None, seed: int = 0) -> LabData:
    """Deterministic stand-in: class templates shared by both splits, noise per split."""
    _check_split(split)
    shape = SHAPES[name]
    n = SIZES[split][name] if n is None else n
    if n < 0:
        raise ValueError(f"number of images must be >= 0, got {n}")
    g = torch.Generator().manual_seed(seed)
    # Low-resolution templates upsampled: smooth, image-like class prototypes.
    low = torch.rand(NUM_CLASSES, shape[0], shape[1] // 4, shape[2] // 4, generator=g)
    templates = torch.nn.functional.interpolate(low, size=shape[1:], mode="bilinear",
                                                align_corners=False)
    ink, amplitude, noise_std, max_shift = DIFFICULTY[name]
    if ink is not None:
        # Strokes where the smooth field is high, black elsewhere: MNIST's kind of image.
        templates = ((templates - ink).clamp(min=0) / (1 - ink)).sqrt()
    g_split = torch.Generator().manual_seed(seed + (1 if split == "train" else 2))
    labels = torch.randint(0, NUM_CLASSES, (n,), generator=g_split)
    # Every (class, shift) image is made once; each sample is then a single gather.
    offsets = [(dy, dx) for dy in range(-max_shift, max_shift + 1)
               for dx in range(-max_shift, max_shift + 1)]
    shifted = torch.stack([torch.roll(templates, shifts=o, dims=(2, 3)) for o in offsets], dim=1)
    which = torch.randint(0, len(offsets), (n,), generator=g_split)
    background = 0.0 if ink is not None else 0.5
    images = background + amplitude * (shifted[labels, which] - background)
    images = (images + torch.randn(n, *shape, generator=g_split) * noise_std).clamp_(0.0, 1.0)
    return LabData(images, labels, name, split, synthetic=True)


IDX_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
             "t10k-labels-idx1-ubyte")


def missing_idx_files(name: str, root: Path | str) -> list[Path]:
    """The files torchvision needs for an MNIST-format set (MNIST, FashionMNIST) that are not
    under root, decompressed, in <root>/<name>/raw/."""
    if name not in ("MNIST", "FashionMNIST"):
        raise ValueError(f"{name!r} is not an MNIST-format data set")
    raw = Path(root) / TORCHVISION[name] / "raw"
    return [raw / f for f in IDX_FILES if not (raw / f).is_file()]


CIFAR10_FILES = ("data_batch_1", "data_batch_2", "data_batch_3", "data_batch_4", "data_batch_5",
                 "test_batch", "batches.meta")


def missing_files(name: str, root: Path | str) -> list[Path]:
    """What torchvision would need under `root` for data set `name` and does not find."""
    if name == "CIFAR-10":
        folder = Path(root) / "cifar-10-batches-py"
        return [folder / f for f in CIFAR10_FILES if not (folder / f).is_file()]
    return missing_idx_files(name, root)


def _torchvision(name: str, split: str, root: Path, download: bool) -> LabData | None:
    import numpy as np
    from torchvision import datasets

    cls = getattr(datasets, TORCHVISION[name])
    try:
        ds = cls(str(root), train=(split == "train"), download=download)
    except RuntimeError:  # torchvision: "Dataset not found. You can use download=True ..."
        return None
    data = ds.data if isinstance(ds.data, torch.Tensor) else torch.from_numpy(np.asarray(ds.data))
    if data.ndim == 3:  # MNIST and Fashion-MNIST: (N, 28, 28) uint8
        data = data.unsqueeze(1)
    else:  # CIFAR-10: (N, 32, 32, 3) uint8
        data = data.permute(0, 3, 1, 2)
    images = data.contiguous().float().div_(255.0)
    labels = torch.as_tensor(ds.targets, dtype=torch.int64)
    return LabData(images, labels, name, split, synthetic=False)


def load(name: str, split: str = "train", root: Path | str | None = None,
         download: bool = False, limit: int | None = None) -> LabData:
    """The real data set when under `root` (or downloaded, if asked), else the stand-in."""
    _check_split(split)
    if name not in SHAPES:
        raise ValueError(f"unknown data set {name!r}; choose from {list(SHAPES)}")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    data = None
    if root is not None:
        data = _torchvision(name, split, Path(root), download)
        if data is None and download:
            raise RuntimeError(f"{name} could not be downloaded into {root}")
    if data is None:
        return synthetic(name, split, limit)
    if limit is not None:
        data = LabData(data.images[:limit], data.labels[:limit], name, split, data.synthetic)
    return data


def load_mnist(split: str = "train", root: Path | str | None = None, download: bool = False,
               limit: int | None = None) -> LabData:
    return load("MNIST", split, root, download, limit)


def load_fashion_mnist(split: str = "train", root: Path | str | None = None,
                       download: bool = False, limit: int | None = None) -> LabData:
    return load("FashionMNIST", split, root, download, limit)


def load_cifar10(split: str = "train", root: Path | str | None = None, download: bool = False,
                 limit: int | None = None) -> LabData:
    return load("CIFAR-10", split, root, download, limit)
