"""Problem 1.3 of shared/seeds 003: the sum of layer-wise timings against the measured time of
the whole forward pass, for the networks of Lu et al.'s tables (AlexNet, VGG-16, GoogLeNet,
ResNet-50), one image.

The whole pass is timed by hpml.time with nothing attached; the layer-wise passes put a clock
around every leaf module (layerwise.py), synchronizing a GPU at every stamp as layer-wise
profiling must. Per layer type: its share of the layer-wise time beside its share of the
FLOPs (convolutions do ~99 % of the arithmetic but not ~99 % of the time).
"""

import statistics

import pytest
import torch

from suites.complexity.flops import count_forward_flops
from suites.complexity.forward import infer, true_fp32
from suites.complexity.layerwise import median_by_layer_type, time_layerwise
from suites.complexity.models import PALEO_MODELS, build_model, num_classes
from suites.complexity.sizes import timing_image_size

pytestmark = pytest.mark.complexity

#: Layer-wise passes per model: the per-pass sums are the samples of layerwise_sum.
PASSES = {"quick": 5, "full": 20}


@pytest.mark.hpml(min_samples=3, max_time=1.0)
@pytest.mark.parametrize("model", PALEO_MODELS)
def test_sum_of_layerwise_times_vs_the_whole_forward_pass(hpml, device: str, model: str) -> None:
    hpml.experiment = f"PALEO: sum of layer-wise times vs the measured forward pass ({device})"
    size = timing_image_size(model, hpml.profile)
    hpml.param(image=size, batch=1)
    shape = (1, 3, size, size)
    flops = count_forward_flops(build_model(model, "meta"), torch.empty(shape, device="meta"))
    net = build_model(model, hpml.device).eval()
    images = torch.randn(shape, generator=torch.Generator().manual_seed(0)).to(hpml.device)

    with true_fp32(hpml.device):
        whole = hpml.time(infer, net, images, name="measured_time")
        passes = time_layerwise(net, images, PASSES[hpml.profile])
    assert whole.result.shape == (1, num_classes(model))

    layer_sum = hpml.record_timing("layerwise_sum", [p.layer_sum for p in passes])
    with_clocks = hpml.record_timing("with_layer_clocks", [p.with_clocks for p in passes])
    hpml.annotate("with_layer_clocks", "with_layer_clocks: the whole pass with every layer's "
                  "clock in place (a GPU synchronized at each stamp)")
    hpml.record("layerwise_over_measured", layer_sum.median / whole.median, better=None,
                note="layerwise_over_measured: sum of layer-wise times / measured forward time")
    hpml.record("clocked_over_measured", with_clocks.median / whole.median, better=None,
                note="clocked_over_measured: the pass with layer clocks / without them (the "
                     "measurement's own overhead)")
    between = statistics.median(p.with_clocks - p.layer_sum for p in passes)
    hpml.record("between_layers", between, unit="s", better=None,
                note="between_layers: the clocked pass minus its layers (residual adds, "
                     "concatenations, flatten, and the clocks' own cost)")

    by_type = median_by_layer_type(passes)
    total = sum(by_type.values())
    for kind, seconds in sorted(by_type.items(), key=lambda item: -item[1]):
        with hpml.row(layer_type=kind) as row:
            row.record("time", seconds, unit="s", better="lower")
            row.record("time_share", 100 * seconds / total, unit="%", better=None)
            row.record("flops_share", 100 * flops.by_layer_type.get(kind, 0) / flops.total,
                       unit="%", better=None, exact=True)

    # Every leaf module ran in every pass, and each clock read a time.
    leaves = {name for name, *_ in passes[0].calls}
    assert leaves and all({name for name, *_ in p.calls} == leaves for p in passes)
    assert all(s >= 0 for p in passes for *_, s in p.calls)
    # The layers are inside the clocked pass: their sum cannot exceed it.
    assert all(p.layer_sum <= p.with_clocks for p in passes)
