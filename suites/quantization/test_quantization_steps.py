"""The lab's five steps, each a test against the same trained fp32 reference (cached per
session, see conftest.py). Each step has its table, "int8 post-training quantization, step b:
int8 weights" and so on: accuracy, its drop from fp32, stored size in bytes, and per layer the
max / mean |output - fp32 output| on the same test images. Run one step alone with e.g.
`pytest -m quantization -k step_e`.
"""
from __future__ import annotations

import pytest
import torch

from suites.quantization.calibration import (
    RangeStats,
    absmax_percentile,
    activation_scales,
    profile_activations,
)
from suites.quantization.cnn import INPUT_FEATURES, LAYERS, accuracy, predictions
from suites.quantization.fake_quant import ActivationQuantizedCNN, quantize_weights
from suites.quantization.int8_gemm import int8_gemm_reference, interpreting
from suites.quantization.integer_model import MemoizedForward, integer_only_model
from suites.quantization.lab import (
    Variant,
    fp32_variant,
    measure_variant,
    record_variant,
    step_experiment,
)
from suites.quantization.plots import histogram
from suites.quantization.scales import WEIGHT_QMAX

WEIGHT_RANGES = "int8 post-training quantization, step a: weight ranges"
ACTIVATION_RANGES = "int8 post-training quantization, step c: activation ranges (calibration)"

pytestmark = pytest.mark.quantization

PERCENTILE = 99.99
# A drop this large means the quantization is broken, not merely lossy (8-bit PTQ loses ~1).
BROKEN_DROP = 5.0


def test_fp32_reference(hpml, device, lab):
    variant = fp32_variant(lab)
    record_variant(hpml, lab, variant, measure_variant(lab, variant))
    assert lab.fp32_accuracy > 30, "the reference CNN did not learn (chance is 10 %)"
    if not lab.synthetic and lab.profile == "full":
        assert lab.fp32_accuracy >= 55, "the full profile should train to the usual ~60 %"


def test_step_a_visualize_weights(hpml, device, lab):
    # Range statistics get their own table: the summary's columns are accuracy, size, errors.
    hpml.experiment = WEIGHT_RANGES
    hpml.param(data=lab.source)
    for name, layer in lab.model.quantizable_layers().items():
        weight = layer.weight.detach().cpu()
        stats = RangeStats.of(weight)
        lo, hi = stats.three_sigma
        inside = ((weight >= lo) & (weight <= hi)).float().mean().item()
        counts = torch.histc(weight, bins=100, min=stats.min, max=stats.max)
        assert counts.sum().item() == weight.numel(), f"{name}: histogram lost values"
        with hpml.row(layer=name) as row:
            for key in ("min", "max", "mean", "std"):
                row.record(f"w_{key}", getattr(stats, key), better=None)
            row.record("w_3sigma_low", lo, better=None)
            row.record("w_3sigma_high", hi, better=None)
            row.record("w_within_3sigma", 100 * inside, unit="%", better=None)
        histogram(hpml.plot_path(f"quantization_weights_{name}.png"), weight, stats,
                  f"{name} weights ({lab.source})", xlabel=f"{name} weight value")


@pytest.mark.int8
@pytest.mark.parametrize("weights", ["per-tensor", "per-channel"])
def test_step_b_quantize_weights(hpml, device, lab, weights):
    quantized = quantize_weights(lab.model, weights)
    for name, layer in lab.model.quantizable_layers().items():
        q, scale = quantized.int8_weights[name], quantized.weight_scales[name]
        assert q.dtype == torch.int8 and q.abs().max() <= WEIGHT_QMAX
        step = scale.reshape(-1, *[1] * (q.dim() - 1)) if scale.dim() else scale
        rounding_error = (q.float() * step - layer.weight.detach()).abs()
        assert (rounding_error <= step / 2 * (1 + 1e-6)).all(), f"{name}: error beyond half a step"
    variant = Variant("b: int8 weights", weights, quantized, quantized.layer_outputs,
                      quantized.nbytes())
    measured = measure_variant(lab, variant)
    record_variant(hpml, lab, variant, measured, name_column=False)  # the weights= column
    assert measured.drop < BROKEN_DROP


def test_step_c_visualize_activations(hpml, device, lab):
    hpml.experiment = ACTIVATION_RANGES
    hpml.param(data=lab.source, calibration_images=len(lab.calibration_images))
    profile = profile_activations(lab.model, lab.calibration_batches())
    for name in LAYERS:
        values = profile[name]
        assert values.numel() == len(lab.calibration_images) * INPUT_FEATURES[name]
        stats = RangeStats.of(values)
        if name != "conv1":  # every later input comes out of a ReLU
            assert stats.min >= 0, f"{name} input should be post-ReLU"
        clip = absmax_percentile(values, PERCENTILE).item()
        with hpml.row(layer=name) as row:
            for key in ("min", "max", "mean", "std"):
                row.record(f"in_{key}", getattr(stats, key), better=None)
            row.record("in_3sigma_high", stats.three_sigma[1], better=None)
            row.record(f"in_abs_p{PERCENTILE}", clip, better=None)
        histogram(hpml.plot_path(f"quantization_activations_{name}.png"), values, stats,
                  f"{name} input on {len(lab.calibration_images)} calibration images",
                  {f"p{PERCENTILE} |x| (percentile clip)": clip},
                  xlabel=f"{name} input activation value")


@pytest.mark.int8
@pytest.mark.parametrize("calibration", ["max", "percentile"])
def test_step_d_quantize_activations(hpml, device, lab, calibration):
    profile = profile_activations(lab.model, lab.calibration_batches())
    scales = activation_scales(profile, calibration, PERCENTILE)
    if calibration == "percentile":
        upper = activation_scales(profile, "max")
        assert all(scales[n] <= upper[n] for n in LAYERS), "a percentile clips below the max"
    model = ActivationQuantizedCNN(quantize_weights(lab.model, "per-channel"), scales)
    variant = Variant("d: int8 weights + activations", calibration, model, model.layer_outputs,
                      model.nbytes(), {"weights": "per-channel"})
    measured = measure_variant(lab, variant)
    record_variant(hpml, lab, variant, measured, name_column=False)  # the calibration= column
    assert measured.drop < BROKEN_DROP


STEP_E = "e: integer-only (int32 bias, fixed-point rescale)"


@pytest.mark.int8
def test_step_e_integer_only_inference(hpml, device, lab):
    """int8 weights (per channel), int32 biases, fixed-point requantization: the model runs
    integer-only on the Triton kernel; its accuracy is measured on the kernel's outputs."""
    if hpml.device.type == "cpu" and not interpreting():
        pytest.skip("a GPU is present, so Triton is not interpreted: the cuda case runs the "
                    "integer-only model on the compiled kernel")
    model = integer_only_model(lab, hpml.device)
    n = lab.scale.triton_images or len(lab.test_images)
    images, labels = lab.test_images[:n], lab.test_labels[:n]
    on_kernel = MemoizedForward(model)
    gemm = "Triton int8" + (" (interpreted)" if hpml.interpreted else "")
    variant = Variant(STEP_E, "max", on_kernel, on_kernel.layer_outputs, model.nbytes(),
                      {"gemm": gemm, "weights": "per-channel"})
    # Per-layer errors on the same images as the accuracy (error_images=n): one kernel pass.
    measured = measure_variant(lab, variant, images, labels, error_images=n)
    record_variant(hpml, lab, variant, measured)
    # The same integer model on torch's integer reference GEMM: bit for bit the same outputs.
    kernel_out = on_kernel.layer_outputs(images)
    reference_out = model.with_gemm(int8_gemm_reference).layer_outputs(images)
    hpml.check_close(torch.cat([kernel_out[name].cpu().flatten() for name in LAYERS]),
                     torch.cat([reference_out[name].cpu().flatten() for name in LAYERS]),
                     rtol=0, atol=0, name="max_rel_error_vs_torch_reference")
    fp32_predictions = predictions(lab.model, images)
    agreement = 100 * (predictions(on_kernel, images) == fp32_predictions).float().mean().item()
    hpml.record("agreement_with_fp32", agreement, unit="%", better="higher",
                note="share of images where the integer model predicts the fp32 class")
    assert agreement > 100 - 2 * BROKEN_DROP
    assert measured.drop < BROKEN_DROP


@pytest.mark.int8
def test_step_e_full_test_set_on_torch_integer_reference(hpml, device, lab):
    """The whole test set through the integer-only model on torch's integer GEMM (the kernel's
    bit-exact reference, fast on CPU): the figure the interpreted kernel is too slow for."""
    model = integer_only_model(lab, hpml.device).with_gemm(int8_gemm_reference)
    variant = Variant(STEP_E, "max", model, model.layer_outputs, model.nbytes(),
                      {"gemm": "torch integer reference", "weights": "per-channel"})
    measured = measure_variant(lab, variant)
    record_variant(hpml, lab, variant, measured)
    assert measured.drop < BROKEN_DROP


@pytest.mark.int8
def test_integer_only_model_is_within_2_points_of_fp32_on_cifar10(hpml, device, lab):
    """Jacob et al. (2018) report <= 2 % loss for 8-bit integer-only inference."""
    if lab.synthetic:
        pytest.skip("reproduces a published accuracy: needs real CIFAR-10 under "
                    "--hpml-data-root (add --hpml-download to fetch it)")
    model = integer_only_model(lab, hpml.device).with_gemm(int8_gemm_reference)
    drop = lab.fp32_accuracy - accuracy(model, lab.test_images, lab.test_labels)
    hpml.experiment = step_experiment(STEP_E)
    hpml.param(variant="max, published bound", data=lab.source)
    hpml.check("accuracy_drop", drop, at_most=2.0, unit="%")
    hpml.reference("published_max_drop", 2.0, unit="%",
                   source="Jacob et al. 2018, 8-bit integer-only inference")
