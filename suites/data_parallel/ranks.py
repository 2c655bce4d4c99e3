"""The lab's rank functions: what one rank of N does, written against torch.distributed only.

Each runs inside an initialized default process group, started by
pytest_hpml.distributed.run_distributed (gloo CPU ranks, or nccl with a GPU per rank) or by
torchrun on one or many nodes, unchanged (see __main__ below):

    train_rank              ResNet-18 on this rank's shard of CIFAR-10, with DDP (world size > 1)
                            or the plain model (one worker: the lab-2 baseline); every epoch's
                            times, the all-reduce of every gradient bucket, the bytes of every
                            collective, and at the end the model's fingerprint and BN statistics
    sample_order_rank       the sample indices this rank's loader serves, epoch by epoch
    allreduce_sweep_rank    all_reduce time per message size on these ranks (the ceiling)

Out of memory in a rank: an out-of-memory error (CUDA's, or the CPU allocator's) is raised again
as a MemoryError naming the rank and the batch, so that the launcher ends every rank and the
parent can tell it from any other failure by its type name alone (lab.launch). On a CPU rank a
memory budget (RLIMIT_DATA: the process's heap and anonymous mappings) stands in for a GPU's
memory, so that question 1's sweep meets its limit at a batch size this machine can reach in
seconds.

    torchrun --nproc_per_node 2 -m suites.data_parallel.ranks --batch 32 --width 8 --images 256
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import inspect
import os
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import pytest_hpml
from pytest_hpml.distributed import rank_device, run_distributed
from suites.common.models import resnet18_cifar
from suites.data_parallel.config import DataSpec, Recipe
from suites.data_parallel.instruments import (
    AllReduceTimer,
    WireCounter,
    clock_for,
    time_back_to_back,
    timed_allreduce_hook,
)
from suites.data_parallel.training import EpochRecord, evaluate, make_loader, train_epoch

CPU_THREADS_PER_WORKER = 1


@dataclass
class RankResult:
    rank: int
    world_size: int
    device: str  # "cpu" or the GPU's name
    backend: str
    data: str  # "CIFAR-10" or "synthetic-CIFAR-10"
    parameters: int
    parameter_bytes: int
    buffer_bytes: int  # BatchNorm running statistics and batch counters
    steps_per_epoch: int
    epochs: list[EpochRecord] = field(default_factory=list)
    construction_bytes: dict[str, int] = field(default_factory=dict)  # collective -> bytes
    evaluation_bytes: dict[str, int] = field(default_factory=dict)
    parameters_digest: str = ""  # sha256 of every parameter: equal on ranks that agree
    buffers_digest: str = ""
    batchnorm_statistics: dict[str, torch.Tensor] = field(default_factory=dict)
    eval_accuracy: float | None = None  # on data.eval_split, BatchNorm in eval mode
    peak_memory: int | None = None  # bytes, CUDA only

    def epoch(self, number: int, synchronized: bool = True) -> EpochRecord:
        return next(e for e in self.epochs if e.epoch == number and e.synchronized == synchronized)


def _has_forward_sync_buffers() -> bool:
    return "forward_sync_buffers" in inspect.signature(DistributedDataParallel.__init__).parameters


def buffer_sync_option(on: bool) -> dict[str, bool]:
    """DDP's keyword for sending rank 0's buffers before every forward: ``forward_sync_buffers``
    where torch has it (it deprecates ``broadcast_buffers``), ``broadcast_buffers`` before."""
    return {"forward_sync_buffers" if _has_forward_sync_buffers() else "broadcast_buffers": on}


def buffers_synced_at_construction(on: bool) -> bool:
    """Whether DDP sends rank 0's buffers when it is built: always with forward_sync_buffers,
    only when on with the older broadcast_buffers."""
    return on or _has_forward_sync_buffers()


def _digest(tensors: list[torch.Tensor]) -> str:
    digest = hashlib.sha256()
    for tensor in tensors:
        digest.update(tensor.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def _batchnorm_statistics(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: torch.cat([m.running_mean, m.running_var]).detach().cpu()
            for name, m in model.named_modules()
            if isinstance(m, nn.modules.batchnorm._BatchNorm) and m.running_mean is not None}


# -- out of memory in a rank ----------------------------------------------------------------------

#: How a failed allocation reads on a CPU: torch's allocator, oneDNN (a convolution whose
#: workspace cannot be allocated), the C++ runtime, a thread whose stack cannot be mapped.
#: A DataLoader worker's error comes back re-raised with the worker's message inside.
CPU_ALLOCATION_FAILURES = ("DefaultCPUAllocator: can't allocate memory", "out of memory",
                           "could not create a primitive", "std::bad_alloc",
                           "Cannot allocate memory", "can't start new thread")


def is_out_of_memory(exc: BaseException, under_budget: bool = False) -> bool:
    """An allocator's out-of-memory error (pytest_hpml.is_out_of_memory: CUDA's, Python's, the
    CPU allocator's); with ``under_budget`` (a memory budget is in force), also any of the
    ways a CPU allocation failure reads."""
    if pytest_hpml.is_out_of_memory(exc):
        return True
    return under_budget and isinstance(exc, RuntimeError) and any(
        phrase in str(exc) for phrase in CPU_ALLOCATION_FAILURES)


def out_of_memory_in_rank(exc: BaseException, rank: int, batch: int) -> MemoryError:
    first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return MemoryError(f"rank {rank} ran out of memory at batch {batch} per worker: {first}")


def _data_segment_bytes() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise OSError("no VmData in /proc/self/status")


@contextlib.contextmanager
def limited_memory(budget: int | None) -> Iterator[None]:
    """Inside the block this process may allocate ``budget`` more bytes than it holds now
    (Linux; DataLoader workers forked inside inherit the limit). The limit is lifted when the
    block ends, errors included: reporting an error needs memory (a thread, a message)."""
    if budget is None:
        yield
        return
    import resource

    before = resource.getrlimit(resource.RLIMIT_DATA)
    limit = _data_segment_bytes() + budget
    if before[1] != resource.RLIM_INFINITY:
        limit = min(limit, before[1])
    resource.setrlimit(resource.RLIMIT_DATA, (limit, before[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, before)


# -- the rank functions ---------------------------------------------------------------------------

def train_rank(rank: int, world_size: int, data: DataSpec, recipe: Recipe,
               device: str = "cpu", memory_budget: int | None = None,
               group: object = None) -> RankResult:
    """Train for ``recipe.epochs`` (then, if asked, one compute-only epoch under no_sync).
    ``group``: train in this process group (rank and world size are this rank's in it) instead
    of the default one (the first node's ranks alone: nodes.py)."""
    if memory_budget is not None and device == "cuda":
        raise ValueError("a memory budget stands in for a GPU's memory on CPU ranks only")
    try:
        with limited_memory(memory_budget):
            return _train(rank, world_size, data, recipe, device, group)
    except Exception as exc:
        if is_out_of_memory(exc, under_budget=memory_budget is not None):
            # Raised, not returned: peers are waiting in a collective, and only a raise makes
            # the launcher end them. The parent sees the type name and records the finding.
            raise out_of_memory_in_rank(exc, rank, recipe.batch_per_worker) from None
        raise


def _train(rank: int, world_size: int, data: DataSpec, recipe: Recipe,
           device: str, group: object = None) -> RankResult:
    dev = rank_device(device)
    if dev.type == "cpu":
        # One core per CPU worker, as a GPU worker is one device (and as torchrun sets
        # OMP_NUM_THREADS=1): 1, 2 and 4 workers then use 1, 2 and 4 cores' worth of threads,
        # and no thread pool spins against another rank's on a shared machine.
        torch.set_num_threads(CPU_THREADS_PER_WORKER)
    torch.manual_seed(recipe.seed)  # the same initial model everywhere (DDP broadcasts it too)
    train = data.train()
    model = resnet18_cifar(recipe.width).to(dev)
    if recipe.sync_batchnorm:
        model = nn.SyncBatchNorm.convert_sync_batchnorm(model)
    result = RankResult(
        rank=rank, world_size=world_size, backend=dist.get_backend(group), data=train.source,
        device=torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        parameters=sum(p.numel() for p in model.parameters()),
        parameter_bytes=sum(p.numel() * p.element_size() for p in model.parameters()),
        buffer_bytes=sum(b.numel() * b.element_size() for b in model.buffers()),
        steps_per_epoch=0)
    clock = clock_for(dev)
    wire = WireCounter()
    with wire.installed():
        wire.phase = "construction"
        ddp, timer = None, None
        if world_size > 1:
            ddp = DistributedDataParallel(
                model, device_ids=[dev.index] if dev.index is not None else None,
                process_group=group, **buffer_sync_option(recipe.broadcast_buffers))
            timer = AllReduceTimer(clock, world_size, group)
            ddp.register_comm_hook(timer, timed_allreduce_hook)
        result.construction_bytes = wire.phase_bytes("construction")
        net = ddp or model
        optimizer = torch.optim.SGD(net.parameters(), lr=recipe.lr, momentum=recipe.momentum,
                                    weight_decay=recipe.weight_decay)
        loader, sampler = make_loader(train, recipe, world_size, rank,
                                      pin_memory=dev.type == "cuda")
        result.steps_per_epoch = len(loader)
        step = 0
        for epoch in range(1, recipe.epochs + 1):
            if recipe.set_epoch:
                sampler.set_epoch(epoch)
            result.epochs.append(train_epoch(net, loader, optimizer, recipe, world_size, dev,
                                             clock, epoch, step, timer, wire))
            step += len(loader)
        if recipe.evaluate:
            # Through the DDP wrapper, as one evaluates in practice: with broadcast_buffers on,
            # its first forward sends rank 0's BatchNorm statistics to every rank.
            wire.phase = "evaluation"
            scored = data.evaluation()
            result.eval_accuracy = evaluate(net, scored.images, scored.labels, dev)
            result.evaluation_bytes = wire.phase_bytes("evaluation")
        result.parameters_digest = _digest(list(model.parameters()))
        result.buffers_digest = _digest(list(model.buffers()))
        result.batchnorm_statistics = _batchnorm_statistics(model)
        if recipe.compute_only_epoch and ddp is not None:
            if recipe.set_epoch:
                sampler.set_epoch(recipe.epochs)  # the same batches as the last timed epoch
            result.epochs.append(train_epoch(net, loader, optimizer, recipe, world_size, dev,
                                             clock, recipe.epochs, step, timer, wire,
                                             no_sync=ddp.no_sync))
    if dev.type == "cuda":
        result.peak_memory = torch.cuda.max_memory_allocated(dev)
    return result


def sample_order_rank(rank: int, world_size: int, images: int, recipe: Recipe,
                      epochs: int) -> list[list[int]]:
    """The indices this rank's loader serves in each epoch, in order (no model involved)."""
    from suites.common.data import synthetic

    train = synthetic("CIFAR-10", "train", images)
    loader, sampler = make_loader(train, recipe, world_size, rank)
    order = []
    for epoch in range(1, epochs + 1):
        if recipe.set_epoch:
            sampler.set_epoch(epoch)
        order.append([i for _, _, index in loader for i in index.tolist()])
    return order


def sweep_iterations(nbytes: int, bytes_per_size: int = 16 * 2**20) -> int:
    """How many all_reduces time one size: about ``bytes_per_size`` in all, 2 to 20. A function
    of the size alone, so that every rank issues the same number of collectives."""
    return max(2, min(20, bytes_per_size // max(1, nbytes)))


def sweep_seconds(sizes: list[int], dev: torch.device, clock: object,
                  group: object = None) -> list[float]:
    """Seconds per all_reduce in ``group`` (None: every rank) of fp32 buffers of each size, on
    this rank: the mean of a few back-to-back calls after one warm-up, as nccl-tests times."""
    seconds, queueing = [], 0.0
    for nbytes in sizes:
        buffer = torch.zeros(max(1, nbytes // 4), dtype=torch.float32, device=dev)
        dist.all_reduce(buffer, group=group)  # warm-up: connections, buffers, algorithm choice
        dist.barrier(group=group)
        # On a GPU a busy-wait covering the host's queueing goes ahead of the start mark
        # (time_back_to_back), so the time is the collectives', not Python's.
        per_call, queueing = time_back_to_back(
            functools.partial(dist.all_reduce, buffer, group=group), sweep_iterations(nbytes),
            clock, queueing)
        seconds.append(per_call)
    return seconds


def allreduce_sweep_rank(rank: int, world_size: int, sizes: list[int],
                         device: str = "cpu") -> dict[str, list[float]]:
    """Seconds per all_reduce of fp32 buffers of each size (bytes) on this rank, the mean of a
    few back-to-back calls after one warm-up, in the manner of nccl-tests; and a check value
    (the sum of the ranks' numbers) that proves the collective reduced what it was given."""
    dev = rank_device(device)
    clock = clock_for(dev)
    clock.calibrate()  # here, not in the first timed size: it would hold one rank back
    seconds = sweep_seconds(sizes, dev, clock)
    check = torch.full((4,), float(rank + 1), device=dev)
    dist.all_reduce(check)
    return {"seconds": seconds, "check": check.cpu().tolist()}


def _main() -> None:
    """One training run from the command line: under torchrun (one process per rank, any
    number of nodes) or, without it, on ranks started by the launcher (--world-size)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(description="ResNet-18 data-parallel training on CIFAR-10")
    parser.add_argument("--batch", type=int, default=128, help="batch per worker")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--width", type=int, default=64, help="64: the published ResNet-18")
    parser.add_argument("--images", type=int, default=0, help="training images (0: all)")
    parser.add_argument("--loader-workers", type=int, default=2)
    parser.add_argument("--root", default=None, help="CIFAR-10 data root (else synthetic)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--out", default=None, help="folder for one JSON summary per rank")
    args = parser.parse_args()
    recipe = Recipe(batch_per_worker=args.batch, epochs=args.epochs, width=args.width,
                    loader_workers=args.loader_workers)
    data = DataSpec(root=args.root, train_images=args.images or None)
    world_size = args.world_size or int(os.environ.get("WORLD_SIZE", "1"))
    results = run_distributed(train_rank, world_size, data, recipe, args.device,
                              device=args.device)
    rank = int(os.environ.get("RANK", "0"))
    summary = {
        "rank": rank, "world_size": world_size, "data": results[0].data,
        "parameters_digests": [r.parameters_digest for r in results],
        "epoch_times": [[e.wall for e in r.epochs] for r in results],
        "gradient_bytes_per_step": [r.epochs[-1].bucket_bytes[-1] if world_size > 1 else 0
                                    for r in results],
    }
    if args.out:
        with open(os.path.join(args.out, f"rank-{rank}.json"), "w", encoding="utf-8") as out:
            json.dump(summary, out)
    elif rank == 0:
        print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    _main()
