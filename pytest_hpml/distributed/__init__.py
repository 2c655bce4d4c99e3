"""Run a function on N ranks with torch.distributed and bring each rank's result back.

    results = run_distributed(train_rank, 4, data, config)   # [result of rank 0, ..., rank 3]

Each rank is a fresh process (forked from a clean forkserver, or spawned; never forked from the
caller, so CUDA can be used in it) that runs
``fn(rank, world_size, *args, **kwargs)`` inside an initialized default process group (gloo on
CPU, nccl with one GPU per rank when there are enough GPUs). The rendezvous is a TCPStore that the
calling process opens on 127.0.0.1 with a port chosen by the OS and holds for the whole run, so
two pytest-xdist workers launching at the same moment can never race for one port.

A rank that raises ends the run: every other rank is terminated and the test sees a
DistributedError naming the rank, with the rank's own traceback. A run that does not finish within
``timeout`` seconds (a deadlocked collective, a rank waiting for a peer that died) kills every rank
and raises DistributedTimeout naming the ranks that had not finished. Ranks live in their own
process group and watch their parent, so nothing they started survives the run; they are not
daemons, so a rank may start processes of its own (DataLoader workers).
`preload_for_ranks(modules)` has the ranks start with a lab's modules already imported.

Lab code is written against torch.distributed only (``dist.all_reduce`` ...), never against this
module, so the same function runs unchanged under torchrun: when the current process already is a
torchrun rank (RANK and WORLD_SIZE in the environment), run_distributed runs ``fn`` in this process
on the existing group and gathers every rank's result with ``all_gather_object``.
"""

from __future__ import annotations

from pytest_hpml.distributed.launcher import preload_for_ranks, run_distributed
from pytest_hpml.distributed.limits import (
    DistributedError,
    DistributedTimeout,
    choose_backend,
    max_world_size,
    rank_device,
    under_torchrun,
    validate_world_size,
)

__all__ = [
    "DistributedError",
    "DistributedTimeout",
    "choose_backend",
    "max_world_size",
    "preload_for_ranks",
    "rank_device",
    "run_distributed",
    "under_torchrun",
    "validate_world_size",
]
