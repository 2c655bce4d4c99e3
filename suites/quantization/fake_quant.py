"""Steps b and d as simulated quantization: weights (and layer inputs) are rounded to int8 and
immediately dequantized, so the float model computes with exactly the values an int8 model
would hold. This isolates the error of each rounding step from the integer arithmetic of
step e."""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from suites.quantization.cnn import CifarCNN
from suites.quantization.scales import (
    Granularity,
    dequantize,
    fake_quantize_activation,
    quantize_weight,
)


@dataclass
class WeightQuantizedCNN:
    """A CifarCNN whose weights are int8 (held dequantized) with float32 scales and biases."""

    model: CifarCNN
    int8_weights: dict[str, torch.Tensor]
    weight_scales: dict[str, torch.Tensor]
    granularity: Granularity

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(x)

    def layer_outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.model.layer_outputs(x)

    def nbytes(self) -> int:
        """Stored size: int8 weights, their float32 scales, float32 biases."""
        weights = sum(q.numel() for q in self.int8_weights.values())
        scales = sum(s.numel() * 4 for s in self.weight_scales.values())
        biases = sum(layer.bias.numel() * 4 for layer in self.model.quantizable_layers().values())
        return weights + scales + biases


@torch.no_grad()
def quantize_weights(model: CifarCNN, granularity: Granularity) -> WeightQuantizedCNN:
    quantized = copy.deepcopy(model)
    int8_weights, scales = {}, {}
    for name, layer in quantized.quantizable_layers().items():
        q, scale = quantize_weight(layer.weight, granularity)
        layer.weight.copy_(dequantize(q, scale))
        int8_weights[name], scales[name] = q, scale
    return WeightQuantizedCNN(quantized, int8_weights, scales, granularity)


@dataclass
class ActivationQuantizedCNN:
    """Weights as in step b, and every layer's input rounded to int8 with a calibrated scale."""

    weights: WeightQuantizedCNN
    input_scales: dict[str, float]

    def _hook(self, name: str, x: torch.Tensor) -> torch.Tensor:
        return fake_quantize_activation(x, self.input_scales[name])

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.weights.model(x, input_hook=self._hook)

    def layer_outputs(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        return self.weights.model.layer_outputs(x, input_hook=self._hook)

    def nbytes(self) -> int:
        return self.weights.nbytes() + 4 * len(self.input_scales)
