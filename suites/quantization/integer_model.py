"""Step e: the CNN with integer-only inference between layers (Jacob et al., section 2).

The float input is quantized once with the calibrated input scale. Every layer then runs as an
int8 GEMM (convolutions through im2col) with an int32 bias in the accumulator's scale
S_w * S_in, and its output is requantized to int8 in the next layer's input scale by a
fixed-point multiplier M = S_w * S_in / S_out; ReLU is the clamp at zero point 0. Max pooling
runs on int8 (it commutes with a positive scale). Only the last layer leaves integers: its
accumulator is scaled to float logits."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from suites.quantization.calibration import activation_scales, profile_activations
from suites.quantization.cnn import LAYERS, CifarCNN
from suites.quantization.fixed_point import FixedPointMultiplier
from suites.quantization.int8_gemm import K_ALIGNMENT, int8_gemm
from suites.quantization.scales import ACT_QMAX, ACT_QMIN, quantize, quantize_bias, quantize_weight

if TYPE_CHECKING:
    from suites.quantization.lab import QuantizationLab

Gemm = Callable[..., torch.Tensor]  # int8_gemm or int8_gemm_reference


@dataclass
class IntegerLayer:
    name: str
    weight: torch.Tensor             # (N, K) int8; a conv's (C_out, C_in * kh * kw), K zero-padded
    in_features: int                 # K as the model has it
    bias: torch.Tensor               # (N,) int32, scale S_w * S_in
    input_scale: float
    weight_scale: torch.Tensor       # (N,) float32
    kernel_size: int | None          # None for a linear layer
    multiplier: FixedPointMultiplier | None  # None for the last layer (float logits)
    output_scale: float | None

    def nbytes(self) -> int:
        """Stored size: the weights as the model has them, without the zero padding of K."""
        extra = self.multiplier.nbytes() if self.multiplier else 4 * self.weight_scale.numel()
        weights = self.weight.shape[0] * self.in_features
        return weights + 4 * self.bias.numel() + extra


def im2col(x: torch.Tensor, kernel_size: int, columns: int | None = None) -> torch.Tensor:
    """(B, C, H, W) -> (B * OH * OW, C * k * k), stride 1, no padding, any dtype (int8 here).
    Column order (c, kh, kw) matches a conv weight flattened from (C_out, C, kh, kw). With
    `columns`, zero columns follow up to that many (K padded as the GEMM wants it, in the copy
    im2col makes anyway instead of a second one in the GEMM)."""
    b, c, h, w = x.shape
    patches = x.unfold(2, kernel_size, 1).unfold(3, kernel_size, 1)  # B, C, OH, OW, k, k
    oh, ow = h - kernel_size + 1, w - kernel_size + 1
    k = c * kernel_size ** 2
    if columns is None or columns == k:
        return patches.permute(0, 2, 3, 1, 4, 5).reshape(b * oh * ow, k)
    out = torch.zeros((b * oh * ow, columns), dtype=x.dtype, device=x.device)
    out[:, :k].view(b, oh, ow, c, kernel_size, kernel_size).copy_(
        patches.permute(0, 2, 3, 1, 4, 5))
    return out


def max_pool_2x2(x: torch.Tensor) -> torch.Tensor:
    b, c, h, w = x.shape
    return x[:, :, :h // 2 * 2, :w // 2 * 2].reshape(b, c, h // 2, 2, w // 2, 2).amax(dim=(3, 5))


class IntegerOnlyCNN:
    def __init__(self, layers: list[IntegerLayer], gemm: Gemm = int8_gemm,
                 device: torch.device | str = "cpu") -> None:
        self.layers = layers
        self.gemm = gemm
        self.device = torch.device(device)

    @classmethod
    def from_float(cls, model: CifarCNN, input_scales: dict[str, float], *,
                   gemm: Gemm = int8_gemm, device: torch.device | str = "cpu") -> IntegerOnlyCNN:
        """Per-output-channel int8 weights, int32 biases, fixed-point multipliers between
        layers; input_scales are the calibrated scales of each layer's input (step d)."""
        float_layers = model.quantizable_layers()
        layers = []
        for i, name in enumerate(LAYERS):
            layer = float_layers[name]
            weight = layer.weight.detach().cpu()
            q, w_scale = quantize_weight(weight, "per-channel")
            s_in = input_scales[name]
            s_out = input_scales[LAYERS[i + 1]] if i + 1 < len(LAYERS) else None
            multiplier = (FixedPointMultiplier.from_real(w_scale.double() * s_in / s_out)
                          if s_out is not None else None)
            flat = q.flatten(1)
            if weight.dim() == 4:  # a conv: K padded once here, im2col pads its columns
                flat = torch.nn.functional.pad(flat, (0, -flat.shape[1] % K_ALIGNMENT))
            layers.append(IntegerLayer(
                name=name, weight=flat.contiguous().to(device), in_features=q.flatten(1).shape[1],
                bias=quantize_bias(layer.bias.detach().cpu(), w_scale, s_in).to(device),
                input_scale=s_in, weight_scale=w_scale.to(device),
                kernel_size=weight.shape[-1] if weight.dim() == 4 else None,
                multiplier=multiplier.to(device) if multiplier else None, output_scale=s_out))
        return cls(layers, gemm, device)

    def with_gemm(self, gemm: Gemm) -> IntegerOnlyCNN:
        return IntegerOnlyCNN(self.layers, gemm, self.device)

    def nbytes(self) -> int:
        return 4 + sum(layer.nbytes() for layer in self.layers)  # + the float input scale

    def _layer(self, layer: IntegerLayer, x: torch.Tensor) -> torch.Tensor:
        conv = layer.kernel_size is not None
        a = im2col(x, layer.kernel_size, layer.weight.shape[1]) if conv else x
        if layer.multiplier is None:  # last layer: dequantize the accumulator to logits
            return self.gemm(a, layer.weight.t(), bias=layer.bias,
                             col_scale=layer.weight_scale * layer.input_scale)
        # ReLU folded into the requantize clamp: qmin = zero point = 0.
        y = self.gemm(a, layer.weight.t(), bias=layer.bias, multiplier=layer.multiplier,
                      zero_point=0, qmin=0, qmax=ACT_QMAX)
        if conv:
            b, _, h, w = x.shape
            k = layer.kernel_size
            y = y.reshape(b, h - k + 1, w - k + 1, -1).permute(0, 3, 1, 2)
        return y

    @torch.no_grad()
    def int8_layer_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Each layer's integer output (int8 after ReLU, before pooling; float logits last)."""
        x = quantize(images.to(self.device), self.layers[0].input_scale, ACT_QMIN, ACT_QMAX)
        out = {}
        for layer, following in zip(self.layers, [*self.layers[1:], None], strict=True):
            y = out[layer.name] = self._layer(layer, x)
            x = max_pool_2x2(y) if layer.kernel_size is not None else y
            if following is not None and following.kernel_size is None:
                x = x.flatten(1)  # conv -> linear, NCHW order as in CifarCNN
            x = x.contiguous()
        return out

    def layer_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        """Dequantized layer outputs, comparable with CifarCNN.layer_outputs."""
        scale = {layer.name: layer.output_scale for layer in self.layers}
        return {name: y if scale[name] is None else y.float() * scale[name]
                for name, y in self.int8_layer_outputs(images).items()}

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.int8_layer_outputs(images)[LAYERS[-1]]


def integer_only_model(lab: QuantizationLab, device: torch.device | str) -> IntegerOnlyCNN:
    """Step e's model of the lab: per-channel int8 weights, activations calibrated by their
    max, on the Triton int8 GEMM (with_gemm swaps it for torch's integer reference)."""
    profile = profile_activations(lab.model, lab.calibration_batches())
    return IntegerOnlyCNN.from_float(lab.model, activation_scales(profile, "max"),
                                     gemm=int8_gemm, device=device)


class MemoizedForward:
    """An integer model whose last pass is kept: under the interpreter one Triton pass over the
    images serves both the accuracy and the per-layer errors."""

    def __init__(self, model: IntegerOnlyCNN) -> None:
        self.model = model
        self.key: tuple | None = None
        self.value: dict[str, torch.Tensor] = {}

    def layer_outputs(self, images: torch.Tensor) -> dict[str, torch.Tensor]:
        key = (images.data_ptr(), tuple(images.shape), images.stride())
        if key != self.key:
            self.key, self.value = key, self.model.layer_outputs(images)
        return self.value

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.layer_outputs(images)["fc3"]
