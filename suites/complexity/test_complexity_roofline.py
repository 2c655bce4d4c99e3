"""Q6: each model's forward pass on the roofline of the device at hand.

The roof is min(peak FLOP/s, intensity x bandwidth) with both ceilings measured by the plugin
(fp32 matmul, large copy). A point's intensity is forward FLOPs / bytes moved (counted by the
dispatch-mode counter, a lower bound on traffic, so the true point lies at or left of it); its
height is the FLOP/s achieved by a timed forward pass. Each device gets its own table and chart.

No assertion that a point stays under the roof: a point above it is a finding about the
ceilings (the quick profile's CPU matmul ceiling is a 512 x 512 matmul, which a library's
convolution kernels can beat, and on a shared machine both are measured under contention).
"""

import pytest
import torch

from suites.complexity.forward import forward_case, infer, true_fp32
from suites.complexity.models import ALL_MODELS
from suites.complexity.paleo import attainable_flops, ridge_point
from suites.complexity.sizes import ROOFLINE_BATCH

pytestmark = pytest.mark.complexity

ROOFLINE = dict(kind="roofline", x="arithmetic_intensity", y="achieved_flops", label="model",
                peak="peak_flops", bandwidth="peak_bandwidth")


@pytest.mark.hpml(min_samples=3, max_time=1.0)
@pytest.mark.hpml_plot("complexity_roofline_cpu.png", title="Forward passes on the CPU roofline",
                       where={"device": "cpu"}, **ROOFLINE)
@pytest.mark.hpml_plot("complexity_roofline_cuda.png", title="Forward passes on the GPU roofline",
                       where={"device": "cuda"}, **ROOFLINE)
@pytest.mark.parametrize("model", ALL_MODELS)
@pytest.mark.hpml_sweep("batch", **ROOFLINE_BATCH)
def test_roofline(hpml, device: str, model: str, batch: int) -> None:
    hpml.experiment = f"Roofline of a forward pass ({device})"
    case = forward_case(model, batch, hpml.device, hpml.profile)
    peak = hpml.ceilings.matmul_flops(torch.float32)
    bandwidth = hpml.ceilings.copy_bandwidth()
    with true_fp32(hpml.device):
        timing = hpml.time(infer, case.net, case.images, name="forward_time")
    intensity = case.arithmetic_intensity
    roof = attainable_flops(intensity, peak, bandwidth)
    achieved = hpml.record_flops("achieved_flops", case.flops, timing).value
    hpml.param(image=case.image_size,
               bound="memory" if intensity < ridge_point(peak, bandwidth) else "compute")
    hpml.record("arithmetic_intensity", intensity, unit="FLOP/B", better=None, exact=True)
    hpml.setting("peak_flops", peak, unit="FLOP/s", note="peak_flops: the measured fp32 matmul "
                 "ceiling")
    hpml.setting("peak_bandwidth", bandwidth, unit="B/s", note="peak_bandwidth: the measured "
                 "copy ceiling")
    hpml.record("attainable_flops", roof, unit="FLOP/s")
    hpml.record("pct_of_roof", 100 * achieved / roof, unit="%", better="higher", timing=timing)
    logits = timing.result  # the timed forward pass must have computed something sane
    assert logits.shape[0] == batch and torch.isfinite(logits).all()
