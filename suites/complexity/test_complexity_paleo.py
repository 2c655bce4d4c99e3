"""Q5: PALEO's estimate, time = FLOPs / (peak x PPP), against measured forward passes.

The K80's published peaks (the lab's question) sit beside this device's measured fp32 matmul
ceiling; PPP is what this device actually reaches: estimated time at full peak / measured time.
"""

import pytest
import torch

from suites.complexity.flops import count_forward_flops
from suites.complexity.forward import forward_case, infer, true_fp32
from suites.complexity.models import (
    ALL_MODELS,
    KNOWN_MODELS,
    build_model,
    image_size,
    num_classes,
)
from suites.complexity.paleo import paleo_time, platform_percent_of_peak
from suites.complexity.reference import (
    K80_DATASHEET,
    K80_PUBLISHED_PEAK_FLOPS,
    TORCHVISION_DOCS,
    TORCHVISION_PUBLISHED,
)
from suites.complexity.sizes import TIMING_BATCHES

pytestmark = pytest.mark.complexity


@pytest.mark.parametrize("model", KNOWN_MODELS)
def test_k80_inference_time_per_image(hpml, model: str) -> None:
    """The lab's question 4 (VGG-16, GoogLeNet, ResNet-50; the others beside them): one image's
    forward pass on a K80 at its published peaks."""
    hpml.experiment = "PALEO: one image's forward pass on a K80 at its published peak (PPP = 1)"
    size = image_size(model)
    hpml.param(image=size)
    flops = count_forward_flops(build_model(model, "meta"), torch.empty(1, 3, size, size,
                                                                        device="meta")).total
    hpml.record("forward_flops", flops, unit="FLOP", better=None, exact=True)
    for precision, peak in K80_PUBLISHED_PEAK_FLOPS.items():
        hpml.reference(f"k80_{precision}_peak", peak, unit="FLOP/s", source=K80_DATASHEET)
        hpml.record(f"k80_{precision}_time", paleo_time(flops, peak), unit="s",
                    note="k80_*_time: PALEO at the published peak, PPP = 1")
    # The estimate is only as good as the FLOP count it divides: the count must be the one
    # torchvision publishes (which counts a multiply-add once).
    if model in TORCHVISION_PUBLISHED:
        hpml.reference("published_gmacs", TORCHVISION_PUBLISHED[model].gmacs,
                       source=TORCHVISION_DOCS)
        assert flops / 2 / 1e9 == pytest.approx(TORCHVISION_PUBLISHED[model].gmacs, rel=0.01)


@pytest.mark.hpml(min_samples=3, max_time=1.0)
@pytest.mark.parametrize("model", ALL_MODELS)
@pytest.mark.hpml_sweep("batch", **TIMING_BATCHES)
def test_paleo_estimate_and_ppp(hpml, device: str, model: str, batch: int) -> None:
    hpml.experiment = f"PALEO: estimated vs measured forward time ({device})"
    case = forward_case(model, batch, hpml.device, hpml.profile)
    hpml.param(image=case.image_size)
    peak = hpml.ceilings.matmul_flops(torch.float32)
    with true_fp32(hpml.device):
        timing = hpml.time(infer, case.net, case.images, name="measured_time")
    logits = timing.result  # the last timed call's output: no extra forward pass
    assert logits.shape == (batch, num_classes(model))
    assert torch.isfinite(logits).all()

    hpml.record("forward_flops", case.flops, unit="FLOP", better=None, exact=True)
    hpml.setting("device_peak", peak, unit="FLOP/s", note="device_peak: the measured fp32 "
                 "torch.matmul ceiling")
    hpml.record("estimated_time", paleo_time(case.flops, peak), unit="s",
                note="estimated_time: PALEO at the measured peak, PPP = 1")
    ppp = platform_percent_of_peak(case.flops, peak, timing.median)
    hpml.record("ppp", 100 * ppp, unit="%", better="higher", timing=timing)
    for precision, k80_peak in K80_PUBLISHED_PEAK_FLOPS.items():
        hpml.record(f"k80_{precision}_time", paleo_time(case.flops, k80_peak), unit="s",
                    note=f"k80_*_time: PALEO at the peak of the {K80_DATASHEET}, PPP = 1")
