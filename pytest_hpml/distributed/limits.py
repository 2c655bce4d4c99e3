"""What a distributed run may ask for here: the backend, the world size, each rank's device,
and the errors a run ends with. Checked before any process starts."""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist

DEFAULT_TIMEOUT = 180.0
BACKENDS = ("gloo", "nccl")
# Oversubscribing CPU cores with gloo ranks still works (they just take turns), but far beyond the
# core count it only measures the scheduler; refuse before starting anything.
GLOO_RANKS_PER_CORE = 4
# How long a terminated rank gets to exit before it is killed outright.
TERMINATE_GRACE = 2.0
# How often the elastic agent looks at its ranks (its monitor interval): also how long a
# finished run may wait before the agent sees it.
POLL_INTERVAL = 0.02
# Collectives inside the ranks time out a little after the run itself, so that a hang is reported
# by the parent as a hang (naming the stuck ranks), not as a timeout error of some waiting peer.
COLLECTIVE_TIMEOUT_MARGIN = 30.0


class DistributedError(RuntimeError):
    """A rank failed: it raised, or it died without reporting (killed, crashed, exit code)."""

    def __init__(self, message: str, rank: int | None = None, rank_traceback: str = "",
                 others: list[str] | None = None, exception_type: str | None = None,
                 raised: dict[int, tuple[str, str]] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.rank_traceback = rank_traceback
        self.others = others or []
        #: The class name of the exception the rank raised ("MemoryError", ...); None when the
        #: rank died without raising.
        self.exception_type = exception_type
        #: Every rank that raised, in the order they raised: rank -> (exception class name,
        #: "Type: message"). The rank blamed first may have died without a word while a peer
        #: still reported why (two ranks out of memory, one killed before it could say so).
        self.raised = raised or {}


class DistributedTimeout(DistributedError):
    """The run did not finish in time; ``unfinished`` lists the ranks still running."""

    def __init__(self, message: str, unfinished: list[int]) -> None:
        super().__init__(message)
        self.unfinished = unfinished


def under_torchrun() -> bool:
    """True when this process is one rank of a job started by torchrun (or any env:// launcher)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def wants_cuda(device: str | torch.device | None) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def choose_backend(world_size: int, device: str | torch.device | None = None) -> str:
    """nccl when the ranks compute on CUDA and each can have its own GPU, gloo otherwise."""
    if wants_cuda(device) and torch.cuda.is_available() and (
        torch.cuda.device_count() >= world_size and dist.is_nccl_available()
    ):
        return "nccl"
    return "gloo"


def max_world_size(backend: str) -> int:
    """The most ranks this machine can run with ``backend``."""
    if backend == "nccl":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return GLOO_RANKS_PER_CORE * (os.cpu_count() or 1)


def validate_world_size(world_size: int, backend: str) -> None:
    """Raise ValueError, before any process starts, when ``world_size`` cannot run here."""
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise ValueError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "nccl" and not dist.is_nccl_available():
        raise ValueError("backend 'nccl' is not available in this torch build; use backend='gloo'")
    limit = max_world_size(backend)
    if world_size > limit:
        if backend == "nccl":
            hint = (f"nccl needs one GPU per rank and {limit} GPU(s) are visible; use at most "
                    f"{limit} ranks or backend='gloo'")
        else:
            hint = (f"gloo allows at most {GLOO_RANKS_PER_CORE} ranks per CPU core "
                    f"({os.cpu_count()} cores here); use at most {limit} ranks")
        raise ValueError(f"cannot run {world_size} ranks on this machine: {hint}")


def set_rank_gpu(local_rank: int, share: bool, cuda: Any = torch.cuda) -> int:
    """Make a GPU this rank's current CUDA device and return its index: GPU `local_rank`, or,
    where ranks may share GPUs (gloo), `local_rank` modulo the GPUs visible. nccl needs a GPU
    of its own per rank: a rank past the visible GPUs is an error that says what to start."""
    count = cuda.device_count()
    if count < 1:
        raise DistributedError(f"rank {local_rank} computes on CUDA but sees no GPU "
                               f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})")
    # One GPU visible to a rank past it: the one srun --gpus-per-task leaves this task.
    if local_rank >= count and not share and count > 1:
        raise DistributedError(
            f"local rank {local_rank} has no GPU of its own: {count} GPU(s) are visible to this "
            f"process; start torchrun with --nproc_per_node {count} (or fewer), or use "
            "backend='gloo'", rank=local_rank)
    index = local_rank % count
    cuda.set_device(index)
    return index


def rank_device(device: str | torch.device | None = None) -> torch.device:
    """The device this rank computes on: its own GPU for a CUDA run (set by the launcher or by
    LOCAL_RANK under torchrun), the CPU otherwise."""
    if wants_cuda(device):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


