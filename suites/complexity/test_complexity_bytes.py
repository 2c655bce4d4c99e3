"""Q4: bytes moved by a forward pass (a lower bound on DRAM traffic, no ncu needed) and each
model's arithmetic intensity. Counted on the meta device, so every batch costs nothing."""

import pytest
import torch

from suites.complexity.bytes_moved import count_forward_bytes
from suites.complexity.flops import count_forward_flops
from suites.complexity.models import ALL_MODELS, build_model, image_size, num_classes
from suites.complexity.sizes import BYTES_BATCHES

pytestmark = pytest.mark.complexity


@pytest.mark.parametrize("model", ALL_MODELS)
@pytest.mark.hpml_sweep("batch", **BYTES_BATCHES)
def test_bytes_moved_and_arithmetic_intensity(hpml, model: str, batch: int) -> None:
    hpml.experiment = "Bytes moved per forward pass and arithmetic intensity"
    size = image_size(model)
    hpml.param(image=size)
    images = torch.empty(batch, 3, size, size, device="meta")
    net = build_model(model, "meta")
    moved = count_forward_bytes(net, images)
    flops = count_forward_flops(net, images).total
    hpml.record("bytes_moved", moved.total, unit="B", better=None, exact=True)
    hpml.record("forward_flops", flops, unit="FLOP", better=None, exact=True)
    hpml.record("arithmetic_intensity", flops / moved.total, unit="FLOP/B", better=None, exact=True)
    top_op, top_bytes = max(moved.by_op.items(), key=lambda kv: kv[1])
    hpml.param(top_op=top_op.removeprefix("aten."))
    hpml.record("top_op_share", 100 * top_bytes / moved.total, unit="%", better=None, exact=True)

    # Every weight is read at least once, the images read and the logits written.
    weights = sum(p.numel() * p.element_size() for p in net.parameters())
    logits = batch * num_classes(model) * 4
    assert moved.total > weights + images.numel() * 4 + logits
