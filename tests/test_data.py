"""suites/common/data.py: the synthetic stand-ins are deterministic, well-shaped and learnable."""

from __future__ import annotations

import pytest
import torch

from suites.common.data import NUM_CLASSES, load_cifar10, load_mnist, synthetic


@pytest.mark.parametrize("loader, shape", [(load_mnist, (1, 28, 28)),
                                           (load_cifar10, (3, 32, 32))])
def test_shapes_range_and_classes(loader, shape) -> None:
    ds = loader("train", limit=2000)
    assert ds.synthetic and ds.source.startswith("synthetic-")
    assert ds.images.shape == (2000, *shape) and ds.images.dtype == torch.float32
    assert ds.labels.shape == (2000,) and ds.labels.dtype == torch.int64
    assert 0.0 <= ds.images.min() and ds.images.max() <= 1.0
    counts = torch.bincount(ds.labels, minlength=NUM_CLASSES)
    assert len(counts) == NUM_CLASSES
    # Balanced-ish: every class within +-30 % of an even share.
    assert counts.min() >= 0.7 * 200 and counts.max() <= 1.3 * 200
    assert ds.flat().shape == (2000, shape[0] * shape[1] * shape[2])


def test_same_result_twice_and_splits_differ() -> None:
    a, b = load_mnist("train", limit=500), load_mnist("train", limit=500)
    assert torch.equal(a.images, b.images) and torch.equal(a.labels, b.labels)
    test = load_mnist("test", limit=500)
    assert not torch.equal(a.images, test.images)


def test_full_size_by_default() -> None:
    assert len(synthetic("MNIST", "test")) == 10_000


def test_missing_data_root_falls_back_to_synthetic(tmp_path) -> None:
    ds = load_mnist("test", root=tmp_path, limit=10)
    assert ds.synthetic and len(ds) == 10


@pytest.mark.parametrize("kwargs, message", [
    ({"split": "val"}, "split must be 'train' or 'test'"),
    ({"limit": -1}, "limit must be >= 0"),
])
def test_bad_arguments(kwargs, message) -> None:
    with pytest.raises(ValueError, match=message):
        load_mnist(**kwargs)


def test_logistic_regression_learns_synthetic_mnist() -> None:
    torch.manual_seed(0)
    train, test = load_mnist("train", limit=1000), load_mnist("test", limit=500)
    model = torch.nn.Linear(28 * 28, NUM_CLASSES)
    opt = torch.optim.Adam(model.parameters(), lr=0.003)
    x = train.flat() - 0.5  # centred pixels: plain logistic regression converges in a few steps
    for _ in range(30):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), train.labels).backward()
        opt.step()
    with torch.no_grad():
        accuracy = (model(test.flat() - 0.5).argmax(1) == test.labels).float().mean().item()
    assert accuracy > 0.6  # chance is 0.1; held-out images of the same class templates
