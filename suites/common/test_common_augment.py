"""The batch augmentation: crops are shifts of the padded image, flips mirror, seeds repeat."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from suites.common.augment import PAD, normalize_cifar10, random_crop_flip


def _reference(image: torch.Tensor, dy: int, dx: int, flip: bool) -> torch.Tensor:
    """One image cropped from its padded copy the slow, obvious way."""
    h, w = image.shape[1:]
    crop = F.pad(image, (PAD, PAD, PAD, PAD))[:, dy:dy + h, dx:dx + w]
    return crop.flip(2) if flip else crop


def test_every_image_is_a_crop_of_its_padded_self_maybe_mirrored() -> None:
    g = torch.Generator().manual_seed(0)
    images = torch.rand(64, 3, 32, 32, generator=g)
    out = random_crop_flip(images, torch.Generator().manual_seed(5))
    assert out.shape == images.shape
    flips = 0
    for i in range(len(images)):
        candidates = [(dy, dx, f) for dy in range(2 * PAD + 1) for dx in range(2 * PAD + 1)
                      for f in (False, True)
                      if torch.equal(out[i], _reference(images[i], dy, dx, f))]
        assert candidates, f"image {i} is no crop of its padded copy"
        flips += candidates[0][2]
    assert 16 <= flips <= 48  # about half are mirrored


def test_same_seed_same_batch_other_seed_other_batch() -> None:
    images = torch.rand(8, 3, 32, 32)
    a = random_crop_flip(images, torch.Generator().manual_seed(1))
    assert torch.equal(a, random_crop_flip(images, torch.Generator().manual_seed(1)))
    assert not torch.equal(a, random_crop_flip(images, torch.Generator().manual_seed(2)))


def test_bad_shapes_and_empty_batches() -> None:
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        random_crop_flip(torch.rand(3, 32, 32))
    assert random_crop_flip(torch.rand(0, 3, 32, 32)).shape == (0, 3, 32, 32)


def test_normalization_uses_the_channel_statistics() -> None:
    images = torch.full((2, 3, 4, 4), 0.4914)
    assert normalize_cifar10(images)[:, 0].abs().max() < 1e-6
