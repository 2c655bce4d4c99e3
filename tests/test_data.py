"""suites/common/data.py: the synthetic stand-ins are deterministic, well-shaped and learnable."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
import torch

from suites.common.data import (
    NUM_CLASSES,
    load_cifar10,
    load_fashion_mnist,
    load_mnist,
    missing_idx_files,
    synthetic,
)


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
def test_an_unknown_split_or_a_negative_limit_is_refused(kwargs, message) -> None:
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


# --- Fashion-MNIST: MNIST's format, read through torchvision, chosen with --hpml-dataset --------

REPO = Path(__file__).resolve().parents[1]


def _write_idx(root: Path, folder: str, images: torch.Tensor, labels: torch.Tensor) -> None:
    """A tiny data set in the IDX format (big-endian header, then bytes), both splits."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    for prefix in ("train", "t10k"):
        n, rows, cols = images.shape
        (raw / f"{prefix}-images-idx3-ubyte").write_bytes(
            struct.pack(">iiii", 2051, n, rows, cols) + images.numpy().tobytes())
        (raw / f"{prefix}-labels-idx1-ubyte").write_bytes(
            struct.pack(">ii", 2049, n) + labels.numpy().tobytes())


def _tiny_set() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    images = torch.randint(0, 256, (6, 28, 28), generator=g, dtype=torch.uint8)
    labels = torch.arange(6, dtype=torch.uint8)
    return images, labels


def test_fashion_mnist_reads_through_torchvision(tmp_path) -> None:
    images, labels = _tiny_set()
    _write_idx(tmp_path, "FashionMNIST", images, labels)
    assert missing_idx_files("FashionMNIST", tmp_path) == []
    ds = load_fashion_mnist("test", root=tmp_path)
    assert not ds.synthetic and ds.source == "FashionMNIST" and ds.name == "FashionMNIST"
    assert ds.images.shape == (6, 1, 28, 28) and ds.labels.tolist() == list(range(6))
    torch.testing.assert_close(ds.images[:, 0] * 255, images.float(), rtol=0, atol=1e-4)
    # An MNIST folder is not a Fashion-MNIST folder, nor the other way round.
    assert load_mnist("test", root=tmp_path, limit=2).synthetic


def test_fashion_mnist_without_files_is_a_labelled_stand_in(tmp_path) -> None:
    ds = load_fashion_mnist("train", root=tmp_path, limit=10)
    assert ds.synthetic and ds.source == "synthetic-FashionMNIST" and len(ds) == 10
    assert [p.name for p in missing_idx_files("FashionMNIST", tmp_path)] == [
        "train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte",
        "t10k-labels-idx1-ubyte"]
    with pytest.raises(ValueError, match="not an MNIST-format data set"):
        missing_idx_files("CIFAR-10", tmp_path)


def test_hpml_dataset_option_needs_the_files(pytester) -> None:
    """--hpml-dataset fashion-mnist without the images stops the run and says how to get them;
    with them, the lab's fixture names the set."""
    pytester.makeconftest((REPO / "conftest.py").read_text())
    pytester.makepyfile(test_which="def test_which(mnist_dataset):\n"
                                   "    assert mnist_dataset == 'FashionMNIST'\n")
    root = pytester.path / "data"
    _write_idx(root, "FashionMNIST", *_tiny_set())
    result = pytester.runpytest("--hpml-dataset=fashion-mnist", f"--hpml-data-root={root}",
                                "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result = pytester.runpytest("--hpml-dataset=fashion-mnist", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--hpml-dataset fashion-mnist needs the real images; missing: "
                                 "no data root given*apt-get install dataset-fashion-mnist*"])


def test_a_data_root_without_the_sets_is_said_once_per_set(tmp_path) -> None:
    # The repository's conftest: pytest run on a test of this repo with an empty data root.
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only",
                           "-p", "no:cacheprovider", f"--hpml-data-root={tmp_path}",
                           "tests/test_units.py"], cwd=root, capture_output=True, text=True,
                          timeout=300)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert out.count(f"hpml: data root {tmp_path}: MNIST not found (torchvision looks for "
                     f"{tmp_path}/MNIST/raw/train-images-idx3-ubyte)") == 1
    assert f"CIFAR-10 not found (torchvision looks for {tmp_path}/cifar-10-batches-py/" \
           "data_batch_1)" in out
