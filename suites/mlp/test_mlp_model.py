"""The MLP's pieces: hand-written backward against autograd, batching, sharding, bad input."""

from __future__ import annotations

import pytest
import torch

from suites.common.data import LabData
from suites.mlp import model
from suites.mlp.host_copies import page_locked
from suites.mlp.training import (
    MLPConfig,
    batch_bounds,
    pack,
    pixel_intensities,
    shard_bounds,
    train_sequential,
    unpack,
)

pytestmark = pytest.mark.mlp


def _batch(n: int, dtype: torch.dtype = torch.float64, input_size: int = 20):
    g = torch.Generator().manual_seed(7)
    return (torch.rand(n, input_size, generator=g, dtype=dtype),
            torch.randint(0, model.NUM_CLASSES, (n,), generator=g))


def test_backward_matches_autograd():
    """The explicit GEMMs and element-wise steps give the gradient autograd finds (fp64)."""
    X, y = _batch(13)
    params = model.init_params(7, torch.float64, input_size=X.shape[1])
    for t in params.tensors():
        t.add_(0.1 * torch.randn_like(t))  # away from zero biases: every term matters
        t.requires_grad_(True)
    reg = 0.3
    model.loss(params, X, y, reg).backward()
    with torch.no_grad():
        cache = model.forward(params, X)
        grads = model.backward(params, cache, y, 1.0 / len(y), reg)
    for name, mine, ref in zip(model.Params.names(), grads.tensors(), params.tensors(),
                               strict=True):
        torch.testing.assert_close(mine, ref.grad, rtol=1e-12, atol=1e-14, msg=name)


def test_shards_of_a_batch_sum_to_the_sequential_gradient():
    """1 / (global B) scaling and reg / N per shard: the all_reduce sum is the batch gradient."""
    X, y = _batch(10)
    params = model.init_params(5, torch.float64, input_size=X.shape[1])
    reg, world_size = 0.2, 4
    whole = model.backward(params, model.forward(params, X), y, 1 / 10, reg)
    summed = torch.zeros(params.count(), dtype=torch.float64)
    for rank in range(world_size):
        lo, hi = shard_bounds(10, world_size, rank)
        part = model.backward(params, model.forward(params, X[lo:hi]), y[lo:hi], 1 / 10,
                              reg / world_size)
        summed += pack(part)
    torch.testing.assert_close(summed, pack(whole), rtol=1e-13, atol=1e-15)


def test_rank_with_zero_rows_contributes_only_its_reg_share():
    X, y = _batch(0)
    params = model.init_params(3, torch.float64, input_size=X.shape[1])
    grads = model.backward(params, model.forward(params, X), y, 1 / 5, 0.5)
    torch.testing.assert_close(grads.W[0], 0.5 * params.W[0])
    torch.testing.assert_close(grads.b[1], torch.zeros_like(params.b[1]))


@pytest.mark.parametrize(("batch", "world_size"), [(10, 4), (3, 4), (1, 2), (8, 2), (0, 3)])
def test_shard_bounds_cover_the_batch_evenly(batch, world_size):
    bounds = [shard_bounds(batch, world_size, r) for r in range(world_size)]
    sizes = [hi - lo for lo, hi in bounds]
    assert bounds[0][0] == 0 and bounds[-1][1] == batch
    assert all(bounds[r][1] == bounds[r + 1][0] for r in range(world_size - 1))
    assert max(sizes) - min(sizes) <= 1


def test_batches_in_order_with_a_smaller_last_one():
    assert batch_bounds(7, 3) == [(0, 3), (3, 6), (6, 7)]
    assert batch_bounds(6, 3) == [(0, 3), (3, 6)]


def test_pack_unpack_round_trip():
    params = model.init_params(4, torch.float32, input_size=6)
    back = unpack(pack(params), params)
    for a, b in zip(back.tensors(), params.tensors(), strict=True):
        assert torch.equal(a, b)


def test_inputs_are_the_courses_grey_levels():
    """The course feeds the bytes of the images, 0..255, not [0, 1]: recovered exactly."""
    grey = torch.tensor([0, 1, 127, 128, 254, 255], dtype=torch.uint8)
    data = LabData(grey.float().div(255).reshape(1, 1, 2, 3), torch.zeros(1, dtype=torch.int64),
                   "MNIST", "train", synthetic=False)
    assert torch.equal(pixel_intensities(data), grey.float().reshape(1, 6))


def test_initialization_is_the_recipe():
    p32 = model.init_params(16, torch.float32)
    p64 = model.init_params(16, torch.float64)
    assert p32.W[0].shape == (16, 784) and p32.W[1].shape == (10, 16)
    assert all(torch.count_nonzero(b) == 0 for b in p32.b)
    # Same draw in both precisions, and about 0.01 standard deviation.
    torch.testing.assert_close(p32.W[0].double(), p64.W[0], rtol=1e-7, atol=0)
    assert 0.009 < p64.W[0].std().item() < 0.011


def test_sgd_lowers_the_training_loss():
    X, _ = _batch(200, torch.float32, input_size=30)
    y = X[:, :model.NUM_CLASSES].argmax(dim=1)  # a learnable rule
    result = train_sequential(X, y, MLPConfig(hidden=16, batch_size=50, lr=2.0, epochs=40))
    assert result.losses[-1] < result.losses[0] - 0.2
    assert len(result.epoch_times) == 40


@pytest.mark.parametrize(("field", "value"), [("hidden", 0), ("hidden", -3), ("batch_size", 0),
                                              ("epochs", 0), ("lr", 0.0), ("lr", -1e-2)])
def test_non_positive_settings_are_refused(field, value):
    with pytest.raises(ValueError, match="must be (a )?positive"):
        MLPConfig(**{field: value})


def test_gemm_flops_of_the_first_layer_is_2DHB():
    assert model.gemm_flops(3000, 512)["forward_layer0"] == 2 * 784 * 512 * 3000


def test_page_locked_host_memory_is_the_same_memory_locked_for_the_block():
    t = torch.arange(1024, dtype=torch.float32)
    with page_locked(t) as locked:
        assert locked.data_ptr() == t.data_ptr()
        locked.add_(1)
    assert t[0].item() == 1.0
    with pytest.raises(ValueError, match="contiguous CPU tensor"):
        with page_locked(torch.zeros(4, 4).t()):
            pass
