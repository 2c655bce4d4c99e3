"""Bad input: an empty calibration set, all-zero tensors (scale 0), NaN, a zero scale. Each is
a clear error or a defined scale, never a division by zero or a NaN downstream."""
from __future__ import annotations

import pytest
import torch

from suites.quantization.calibration import activation_scales, profile_activations
from suites.quantization.cnn import LAYERS, CifarCNN
from suites.quantization.int8_gemm import int8_gemm_reference
from suites.quantization.integer_model import IntegerOnlyCNN
from suites.quantization.scales import (
    ZERO_TENSOR_SCALE,
    quantize,
    quantize_bias,
    quantize_weight,
    weight_scale,
)

pytestmark = pytest.mark.quantization


def test_empty_calibration_set_is_a_clear_error():
    model = CifarCNN().eval()
    with pytest.raises(ValueError, match="calibration set is empty"):
        profile_activations(model, [])
    with pytest.raises(ValueError, match="calibration set is empty"):
        profile_activations(model, [torch.empty(0, 3, 32, 32)])


@pytest.mark.parametrize("granularity", ["per-tensor", "per-channel"])
def test_all_zero_weights_get_a_defined_scale(granularity):
    weight = torch.zeros(6, 3, 5, 5)
    weight[1] = torch.linspace(-0.5, 0.5, 75).reshape(3, 5, 5)  # one live channel
    q, scale = quantize_weight(weight, granularity)
    assert torch.isfinite(scale).all() and (scale > 0).all()
    if granularity == "per-channel":
        assert scale[0] == ZERO_TENSOR_SCALE and scale[1] == pytest.approx(0.5 / 127)
    assert (q[0] == 0).all()
    assert weight_scale(torch.zeros(4, 4), "per-tensor") == ZERO_TENSOR_SCALE


def test_all_zero_activations_get_a_defined_scale():
    profile = {name: torch.zeros(100) for name in LAYERS}
    for method in ("max", "percentile"):
        assert activation_scales(profile, method) == {name: ZERO_TENSOR_SCALE for name in LAYERS}


def test_dead_layer_still_gives_finite_integer_logits():
    """A layer whose weights and biases are all zero: its output and the next layer's input
    are exactly zero, and every scale and fixed-point multiplier stays finite."""
    torch.manual_seed(0)
    model = CifarCNN().eval()
    with torch.no_grad():
        model.conv2.weight.zero_()
        model.conv2.bias.zero_()
    images = torch.rand(8, 3, 32, 32) * 2 - 1
    scales = activation_scales(profile_activations(model, [images]))
    assert scales["fc1"] == ZERO_TENSOR_SCALE  # conv2's output, fc1's input, is all zero
    integer = IntegerOnlyCNN.from_float(model, scales, gemm=int8_gemm_reference)
    logits = integer(images)
    assert torch.isfinite(logits).all()
    assert (integer.int8_layer_outputs(images)["conv2"] == 0).all()


def test_nan_and_zero_scales_are_clear_errors():
    with pytest.raises(ValueError, match="NaN or Inf"):
        weight_scale(torch.tensor([1.0, float("nan")]), "per-tensor")
    with pytest.raises(ValueError, match="NaN or Inf"):
        activation_scales({"conv1": torch.tensor([0.5, float("inf")])})
    with pytest.raises(ValueError, match="empty"):
        weight_scale(torch.empty(0, 3), "per-channel")
    with pytest.raises(ValueError, match="scale must be finite and > 0"):
        quantize(torch.ones(3), 0.0, -128, 127)
    with pytest.raises(ValueError, match="granularity"):
        weight_scale(torch.ones(2, 2), "per-row")
    with pytest.raises(ValueError, match="calibration method"):
        activation_scales({"conv1": torch.ones(3)}, "mse")


def test_bias_overflowing_int32_is_a_clear_error():
    with pytest.raises(ValueError, match="overflows int32"):
        quantize_bias(torch.tensor([1e3]), torch.tensor([1e-8]), 1e-4)
