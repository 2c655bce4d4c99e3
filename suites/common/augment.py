"""The usual CIFAR-10 training augmentation on image tensors: a random 32x32 crop of the image
padded by 4 pixels, and a horizontal flip with probability 1/2 (He et al. 2016), drawn from a
generator so that a seeded run sees the same images; and the per-channel normalization.

Done on a whole batch of tensors at once (no PIL round trip): the labs hold CIFAR-10 as a
uint8-derived float tensor, and per-image Python transforms would dominate a CPU epoch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

#: Per-channel mean and standard deviation of the CIFAR-10 training images (published, widely
#: used constants; applied to real and synthetic images alike so both see the same pipeline).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)
PAD = 4


def random_crop_flip(images: torch.Tensor, generator: torch.Generator | None = None,
                     pad: int = PAD) -> torch.Tensor:
    """(N, C, H, W) -> (N, C, H, W): each image shifted by up to `pad` pixels in each direction
    (zeros shifted in, as a crop of the zero-padded image) and mirrored with probability 1/2."""
    if images.dim() != 4:
        raise ValueError(f"expected a batch (N, C, H, W), got shape {tuple(images.shape)}")
    n, _, h, w = images.shape
    if n == 0:
        return images.clone()
    padded = F.pad(images, (pad, pad, pad, pad))
    device = images.device
    dy = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(device)
    dx = torch.randint(0, 2 * pad + 1, (n,), generator=generator).to(device)
    flip = torch.rand(n, generator=generator).to(device) < 0.5
    rows = dy[:, None] + torch.arange(h, device=device)[None, :]  # (N, H)
    cols = dx[:, None] + torch.arange(w, device=device)[None, :]  # (N, W)
    cols = torch.where(flip[:, None], cols.flip(1), cols)
    batch = torch.arange(n, device=device)[:, None, None]
    # Gather rows then columns per image: (N, H, W) index grids into the padded batch.
    out = padded.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]
    return out.permute(0, 3, 1, 2).contiguous()


def normalize_cifar10(images: torch.Tensor) -> torch.Tensor:
    """[0, 1] pixels -> zero mean, unit variance per channel (CIFAR-10 statistics)."""
    mean = torch.tensor(CIFAR10_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(CIFAR10_STD, device=images.device).view(1, 3, 1, 1)
    return (images - mean) / std
