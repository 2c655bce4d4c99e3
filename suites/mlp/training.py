"""Training recipes: sequential SGD in one process, and data-parallel SGD on N ranks.

Both walk the training set in order (no shuffle; the last batch may be smaller). A data-parallel
rank holds its rows of each batch, scales its gradients by 1 / (global batch size), adds reg / N,
packs all four gradients into one contiguous buffer and sums it with a single all_reduce, so every
rank takes the same step as the sequential model, up to the order of floating-point additions.

The rank function is written against torch.distributed only: pytest_hpml.distributed.run_distributed
runs it on spawned ranks, and torchrun runs it unchanged (see __main__ at the bottom).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from suites.mlp import model
from suites.mlp.model import Params


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
    from suites.common.data import load_mnist

    parser = argparse.ArgumentParser(description="data-parallel vs sequential MLP training")
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--batch", type=int, default=250)
    parser.add_argument("--lr", type=float, default=5e-2)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--limit", type=int, default=4000, help="training images (0: all)")
    parser.add_argument("--dtype", choices=["fp32", "fp64"], default="fp32")
    parser.add_argument("--root", default=None, help="MNIST data root (else synthetic)")
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    dtype = {"fp32": torch.float32, "fp64": torch.float64}[args.dtype]
    config = MLPConfig(hidden=args.hidden, batch_size=args.batch, lr=args.lr, epochs=args.epochs)
    data = load_mnist("train", root=args.root, limit=args.limit or None)
    test = load_mnist("test", root=args.root, limit=(args.limit // 4) or None)
    world_size = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
    results = run_distributed(data_parallel_rank, world_size, data.flat(), data.labels, config,
                              dtype)
    if int(os.environ.get("RANK", "0")) != 0:
        return
    sequential = train_sequential(data.flat(), data.labels, config, dtype)
    X_test = test.flat().to(dtype)
    print(f"{data.source}: {len(data)} images, {world_size} ranks, {args.dtype}, {config}")
    print(f"Precision on testing set for sequential training = "
          f"{model.precision(sequential.params, X_test, test.labels)}")
    print(f"Precision on testing set for parallel training = "
          f"{model.precision(results[0].params, X_test, test.labels)}")
    for name, err in relative_errors(results[0].params, sequential.params).items():
        print(f"Rel. err. in {name}: {err:.6g}")


if __name__ == "__main__":
    _main()
