"""Training recipes: sequential SGD in one process, and data-parallel SGD on N ranks.

Both walk the training set in order (no shuffle; the last batch may be smaller). A data-parallel
rank holds its rows of each batch, scales its gradients by 1 / (global batch size), adds reg / N,
packs all four gradients into one contiguous buffer and sums it with a single all_reduce, so every
rank takes the same step as the sequential model, up to the order of floating-point additions.

The recipe is the course's (CME 213 final project: a 784-H-10 sigmoid MLP in C++/Armadillo,
then MPI + CUDA). Each choice, and where the course's code makes it, as public copies of the
project's code hold it (their test names and messages, gtestProfile.nsys1, "Par loss at
iteration", "Precision on testing set for sequential training", are the seed report's):

    inputs    raw grey levels 0..255, never scaled (mnist.cpp's read_mnist stores each byte as
              (nn_real) of it): pixel_intensities below.
    init      W[l] = 0.01 * randn(out, in), b[l] = 0 (the NeuralNetwork constructor): model.py.
    gradient  of the batch-MEAN cross-entropy, (1 / B) (P - Y) (backprop's diff), plus reg * W
              on the weight matrices only; a rank of the data-parallel version weights its rows
              by 1 / (global B) and adds reg / num_procs, then one MPI_Allreduce sums the lot.
    loss      printed as mean cross-entropy + 0.5 reg (||W0||^2 + ||W1||^2): reg is in it.
    setting   nsys1 (the seed's run): 60000 images, H = 512, batch 3000, 1 epoch, reg 1e-4,
              lr 1e-2 (MLPConfig's defaults).

Checked against the seed's own numbers (seed report 000, MNIST) rather than trusted:
  - initial loss 2.306 = ln 10 (2.3026) + 0.5 * 1e-4 * (||W0||^2 + ||W1||^2 = 1e-4 * 512 * 794,
    so 0.002) + the spread of the initial logits (a few 1e-3 for one draw). That fixes the init
    scale (0.01) and shows reg is in the printed loss; it cannot tell the input scaling apart:
    on Fashion-MNIST the first loss is 2.309 with inputs in [0, 1] and 2.311 with 0..255.
  - one epoch at lr 1e-2 reaching 0.7279 is what does. With inputs in [0, 1], 0.01 weights and
    mean gradients, 20 steps cannot move the sigmoid layer: on Fashion-MNIST the loss goes from
    2.309 to 2.301 and the precision stays at chance (0.13; 0.10 at lr 6e-2). With 0..255 the
    first layer's pre-activations spread by about 0.01 * ||x|| (||x|| is 3100 on average on
    Fashion-MNIST, so ~30): the hidden units start as near-binary random features of the image,
    dW0 = dZ1^T X is 255 times larger, and one epoch learns (Fashion-MNIST: loss 2.311 -> 1.63,
    precision 0.67 at lr 1e-2), with a learning-rate curve that rises to a maximum and falls
    again, as the seed's does (0.62 at 5e-3 up to 0.86 at 6e-2, then 0.84 at 8e-2; on
    Fashion-MNIST 0.65 up to 0.71 at 4e-2, then 0.66 at 8e-2), and with H = 2048 (0.74) and
    4 epochs (0.73) both above H = 512, as in the seed (0.83 and 0.85 against 0.73).

The rank function is written against torch.distributed only: pytest_hpml.distributed.run_distributed
runs it on spawned ranks, and torchrun runs it unchanged (see __main__ at the bottom).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from suites.common.data import LabData
from suites.mlp import model
from suites.mlp.model import Params

# The course reads each pixel's byte as a number: grey levels 0..255 are the model's inputs.
PIXEL_MAX = 255.0


def pixel_intensities(data: LabData) -> torch.Tensor:
    """(N, 784) float32 grey levels 0..255, the course's inputs (see the recipe above).

    LabData holds images in [0, 1] (the labs' common form); rounding gives the bytes of a real
    data set back exactly, and puts a synthetic stand-in on the same 8-bit scale.
    """
    return data.flat().mul(PIXEL_MAX).round_()


@dataclass(frozen=True)
class MLPConfig:
    hidden: int = 512
    batch_size: int = 3000
    lr: float = 1e-2
    epochs: int = 1
    reg: float = 1e-4
    gemm: str = "torch"  # "torch" | "triton": which kernel runs the GEMMs

    def __post_init__(self) -> None:
        for name in ("hidden", "batch_size", "epochs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if not self.lr > 0:
            raise ValueError(f"learning rate must be positive, got {self.lr!r}")
        if self.reg < 0:
            raise ValueError(f"reg must be >= 0, got {self.reg!r}")
        if self.gemm not in ("torch", "triton"):
            raise ValueError(f"gemm must be 'torch' or 'triton', got {self.gemm!r}")


@dataclass
class TrainResult:
    params: Params
    losses: list[float] = field(default_factory=list)  # training loss of each batch, pre-step
    epoch_times: list[float] = field(default_factory=list)  # seconds per epoch


def matmul_for(config: MLPConfig, dtype: torch.dtype) -> model.MatMul:
    if config.gemm == "torch":
        return torch.matmul
    if dtype != torch.float32:
        raise ValueError(f"the Triton tiled matmul takes fp32 inputs, got {dtype}; "
                         "use gemm='torch' for other precisions")
    from suites.mlp.tiled_matmul import tiled_matmul

    return tiled_matmul


def batch_bounds(n: int, batch_size: int) -> list[tuple[int, int]]:
    """[start, stop) of each batch, in order; the last one may be smaller."""
    return [(start, min(start + batch_size, n)) for start in range(0, n, batch_size)]


def shard_bounds(batch: int, world_size: int, rank: int) -> tuple[int, int]:
    """This rank's rows of a batch: sizes differ by at most one, and a rank may get none."""
    base, extra = divmod(batch, world_size)
    start = rank * base + min(rank, extra)
    return start, start + base + (1 if rank < extra else 0)


def _synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train_sequential(X: torch.Tensor, labels: torch.Tensor, config: MLPConfig,
                     dtype: torch.dtype = torch.float32,
                     device: torch.device | str = "cpu") -> TrainResult:
    device = torch.device(device)
    matmul = matmul_for(config, dtype)
    params = model.init_params(config.hidden, dtype, device, input_size=X.shape[1])
    X = X.to(device=device, dtype=dtype)
    labels = labels.to(device)
    result = TrainResult(params)
    # One forward and backward pass on a copy, outside the timed epochs: the first call pays
    # one-off costs (thread pools, allocator, kernel compilation) that are not per-epoch work.
    first = slice(0, min(config.batch_size, X.shape[0]))
    scratch = params.clone()
    model.backward(scratch, model.forward(scratch, X[first], matmul), labels[first], 1.0,
                   config.reg, matmul)
    for _ in range(config.epochs):
        _synchronize(device)
        start = time.perf_counter()
        for lo, hi in batch_bounds(X.shape[0], config.batch_size):
            cache = model.forward(params, X[lo:hi], matmul)
            result.losses.append(_batch_loss(params, cache, labels[lo:hi], config.reg))
            grads = model.backward(params, cache, labels[lo:hi], 1.0 / (hi - lo), config.reg,
                                   matmul)
            model.sgd_step(params, grads, config.lr)
        _synchronize(device)
        result.epoch_times.append(time.perf_counter() - start)
    return result


def _batch_loss(params: Params, cache: model.Cache, labels: torch.Tensor, reg: float) -> float:
    ce = model.cross_entropy_sum(cache.P, labels) / labels.numel()
    return (ce + model.regularization(params, reg)).item()


def pack(grads: Params) -> torch.Tensor:
    """All gradients in one contiguous buffer: one all_reduce instead of four."""
    return torch.cat([g.reshape(-1) for g in grads.tensors()])


def unpack(buffer: torch.Tensor, like: Params) -> Params:
    parts, offset = [], 0
    for t in like.tensors():
        parts.append(buffer[offset:offset + t.numel()].view_as(t))
        offset += t.numel()
    return Params([parts[0], parts[2]], [parts[1], parts[3]])


def data_parallel_rank(rank: int, world_size: int, X: torch.Tensor, labels: torch.Tensor,
                       config: MLPConfig, dtype: torch.dtype = torch.float32,
                       device: str = "cpu") -> TrainResult:
    """One rank of data-parallel SGD; the process group is already initialized.

    Every rank holds the whole training set (as each MPI rank of the lab reads it) and takes
    its own rows of each batch. The returned losses are the global batch losses.
    """
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else \
        torch.device("cpu")
    matmul = matmul_for(config, dtype)
    params = model.init_params(config.hidden, dtype, dev, input_size=X.shape[1])
    X = X.to(dtype=dtype)
    result = TrainResult(params)
    local_reg = config.reg / world_size
    for _ in range(config.epochs):
        _synchronize(dev)
        start = time.perf_counter()
        for lo, hi in batch_bounds(X.shape[0], config.batch_size):
            s_lo, s_hi = shard_bounds(hi - lo, world_size, rank)
            X_local = X[lo + s_lo:lo + s_hi].to(dev, non_blocking=True)
            y_local = labels[lo + s_lo:lo + s_hi].to(dev, non_blocking=True)
            cache = model.forward(params, X_local, matmul)
            grads = model.backward(params, cache, y_local, 1.0 / (hi - lo), local_reg, matmul)
            # The loss rides along in the same buffer: still one all_reduce per step.
            ce_local = model.cross_entropy_sum(cache.P, y_local) / (hi - lo)
            buffer = torch.cat([pack(grads), ce_local.reshape(1)])
            dist.all_reduce(buffer)
            model_loss = buffer[-1] + model.regularization(params, config.reg)
            result.losses.append(model_loss.item())
            model.sgd_step(params, unpack(buffer[:-1], params), config.lr)
        _synchronize(dev)
        result.epoch_times.append(time.perf_counter() - start)
    return result


def relative_errors(parallel: Params, sequential: Params) -> dict[str, float]:
    """||P_par - P_seq|| / ||P_seq|| per parameter tensor, computed in fp64."""
    errors = {}
    for name, p, s in zip(Params.names(), parallel.tensors(), sequential.tensors(), strict=True):
        p64, s64 = p.detach().cpu().double(), s.detach().cpu().double()
        errors[name] = ((p64 - s64).norm() / s64.norm()).item()
    return errors


def _main() -> None:
    """Data-parallel vs sequential, as in question 1.1. Either
        python -m suites.mlp.training --world-size 4              (ranks started by the launcher)
        torchrun --standalone --nproc_per_node 4 -m suites.mlp.training   (ranks from torchrun)
    """
    import argparse

    from pytest_hpml.distributed import run_distributed
    from suites.common.data import load

    parser = argparse.ArgumentParser(description="data-parallel vs sequential MLP training")
    defaults = MLPConfig()  # the seed's run: H = 512, batch 3000, lr 1e-2, 1 epoch
    parser.add_argument("--hidden", type=int, default=defaults.hidden)
    parser.add_argument("--batch", type=int, default=defaults.batch_size)
    parser.add_argument("--lr", type=float, default=defaults.lr)
    parser.add_argument("--epochs", type=int, default=defaults.epochs)
    parser.add_argument("--limit", type=int, default=0,
                        help="training images (0: all 60000, and all 10000 test images; else a "
                             "quarter as many test images)")
    parser.add_argument("--dtype", choices=["fp32", "fp64"], default="fp32")
    parser.add_argument("--root", default=None, help="data root (else a synthetic stand-in)")
    parser.add_argument("--dataset", choices=["MNIST", "FashionMNIST"], default="MNIST")
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    dtype = {"fp32": torch.float32, "fp64": torch.float64}[args.dtype]
    config = MLPConfig(hidden=args.hidden, batch_size=args.batch, lr=args.lr, epochs=args.epochs)
    data = load(args.dataset, "train", root=args.root, limit=args.limit or None)
    test = load(args.dataset, "test", root=args.root, limit=(args.limit // 4) or None)
    X = pixel_intensities(data)
    world_size = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
    results = run_distributed(data_parallel_rank, world_size, X, data.labels, config, dtype)
    if int(os.environ.get("RANK", "0")) != 0:
        return
    sequential = train_sequential(X, data.labels, config, dtype)
    X_test = pixel_intensities(test).to(dtype)
    print(f"{data.source}: {len(data)} images, {world_size} ranks, {args.dtype}, {config}")
    print(f"Precision on testing set for sequential training = "
          f"{model.precision(sequential.params, X_test, test.labels)}")
    print(f"Precision on testing set for parallel training = "
          f"{model.precision(results[0].params, X_test, test.labels)}")
    for name, err in relative_errors(results[0].params, sequential.params).items():
        print(f"Rel. err. in {name}: {err:.6g}")


if __name__ == "__main__":
    _main()
