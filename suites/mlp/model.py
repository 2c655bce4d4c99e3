"""The course's two-layer MLP, 784 -> H -> 10, with forward and backward written out by hand.

    Z1 = X W0^T + b0      A1 = sigmoid(Z1)      Z2 = A1 W1^T + b1      P = softmax(Z2)
    loss = mean cross-entropy + 0.5 * reg * (||W0||^2 + ||W1||^2)      (biases not regularized)

Every GEMM goes through one `matmul` callable (torch.matmul or the Triton tiled kernel), so the
five GEMMs of a step are visible and switchable: two in the forward pass, three in the backward
pass (dW1, dA1, dW0; the input gradient dX is never needed). W[l] is (out, in) as in the lab.
X holds the course's inputs, grey levels 0..255 (training.pixel_intensities says why).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

INPUT_SIZE = 784
NUM_CLASSES = 10
INIT_SCALE = 0.01
SEED = 1234  # layer l draws its weights from a generator seeded with SEED + l

MatMul = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass
class Params:
    """W[0] (H, D), b[0] (H,), W[1] (C, H), b[1] (C,)."""

    W: list[torch.Tensor]
    b: list[torch.Tensor]

    def tensors(self) -> list[torch.Tensor]:
        return [self.W[0], self.b[0], self.W[1], self.b[1]]

    @staticmethod
    def names() -> list[str]:
        return ["W[0]", "b[0]", "W[1]", "b[1]"]

    def clone(self) -> Params:
        return Params([w.clone() for w in self.W], [b.clone() for b in self.b])

    def to(self, device: torch.device | str) -> Params:
        return Params([w.to(device) for w in self.W], [b.to(device) for b in self.b])

    def count(self) -> int:
        return sum(t.numel() for t in self.tensors())


@dataclass
class Cache:
    """What the backward pass needs from the forward pass."""

    X: torch.Tensor
    A1: torch.Tensor
    P: torch.Tensor


def init_params(hidden: int, dtype: torch.dtype = torch.float32,
                device: torch.device | str = "cpu", input_size: int = INPUT_SIZE,
                num_classes: int = NUM_CLASSES) -> Params:
    """W = 0.01 * randn from a fixed seed per layer, biases zero.

    The draw is made in fp64 on the CPU and then cast, so fp32 and fp64 runs (and CPU and GPU
    runs) start from the same weights up to rounding.
    """
    if hidden <= 0:
        raise ValueError(f"hidden size must be positive, got {hidden}")
    sizes = [input_size, hidden, num_classes]
    W, b = [], []
    for layer in range(2):
        g = torch.Generator().manual_seed(SEED + layer)
        w = INIT_SCALE * torch.randn(sizes[layer + 1], sizes[layer], generator=g,
                                     dtype=torch.float64)
        W.append(w.to(device=device, dtype=dtype))
        b.append(torch.zeros(sizes[layer + 1], dtype=dtype, device=device))
    return Params(W, b)


def forward(params: Params, X: torch.Tensor, matmul: MatMul = torch.matmul) -> Cache:
    Z1 = matmul(X, params.W[0].T) + params.b[0]
    A1 = torch.sigmoid(Z1)
    Z2 = matmul(A1, params.W[1].T) + params.b[1]
    return Cache(X, A1, torch.softmax(Z2, dim=1))


def one_hot(labels: torch.Tensor, num_classes: int, dtype: torch.dtype) -> torch.Tensor:
    Y = torch.zeros(labels.numel(), num_classes, dtype=dtype, device=labels.device)
    Y[torch.arange(labels.numel(), device=labels.device), labels] = 1
    return Y


def cross_entropy_sum(P: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Sum (not mean) over rows, so shards of a batch add up to the batch."""
    picked = P[torch.arange(labels.numel(), device=labels.device), labels]
    return -torch.log(picked).sum()


def regularization(params: Params, reg: float) -> torch.Tensor:
    return 0.5 * reg * sum((w * w).sum() for w in params.W)


def loss(params: Params, X: torch.Tensor, labels: torch.Tensor, reg: float,
         matmul: MatMul = torch.matmul) -> torch.Tensor:
    """Mean cross-entropy over the batch plus the L2 term on the weight matrices."""
    cache = forward(params, X, matmul)
    return cross_entropy_sum(cache.P, labels) / labels.numel() + regularization(params, reg)


def backward(params: Params, cache: Cache, labels: torch.Tensor, scale: float, reg: float,
             matmul: MatMul = torch.matmul) -> Params:
    """Gradients of scale * sum-over-rows cross-entropy + 0.5 * reg * sum ||W||^2.

    Sequential training uses scale = 1 / B and the full reg. A data-parallel rank holding some
    rows of the batch uses scale = 1 / (global B) and reg / N: summed over the N ranks, that is
    exactly the sequential gradient. A rank with zero rows gets only its reg / N share.
    """
    dZ2 = (cache.P - one_hot(labels, cache.P.shape[1], cache.P.dtype)) * scale
    dW1 = matmul(dZ2.T, cache.A1) + reg * params.W[1]
    db1 = dZ2.sum(dim=0)
    dA1 = matmul(dZ2, params.W[1])
    dZ1 = dA1 * cache.A1 * (1 - cache.A1)  # sigmoid' = s (1 - s)
    dW0 = matmul(dZ1.T, cache.X) + reg * params.W[0]
    db0 = dZ1.sum(dim=0)
    return Params([dW0, dW1], [db0, db1])


def sgd_step(params: Params, grads: Params, lr: float) -> None:
    for p, g in zip(params.tensors(), grads.tensors(), strict=True):
        p.sub_(lr * g)


def predict(params: Params, X: torch.Tensor, matmul: MatMul = torch.matmul) -> torch.Tensor:
    return forward(params, X, matmul).P.argmax(dim=1)


def precision(params: Params, X: torch.Tensor, labels: torch.Tensor,
              matmul: MatMul = torch.matmul) -> float:
    """The lab's "precision on the testing set": the fraction of correctly classified images."""
    return (predict(params, X, matmul) == labels).to(torch.float64).mean().item()


def gemm_flops(batch: int, hidden: int, input_size: int = INPUT_SIZE,
               num_classes: int = NUM_CLASSES) -> dict[str, int]:
    """FLOPs of each GEMM of one training step (2 * m * n * k each)."""
    D, H, C, B = input_size, hidden, num_classes, batch
    return {
        "forward_layer0": 2 * D * H * B,  # X W0^T: the lab's 2DHB
        "forward_layer1": 2 * H * C * B,
        "backward_dW1": 2 * C * H * B,
        "backward_dA1": 2 * B * C * H,
        "backward_dW0": 2 * H * D * B,
    }
