"""Run a function on N ranks with torch.distributed and bring each rank's result back.

    results = run_distributed(train_rank, 4, data, config)   # [result of rank 0, ..., rank 3]

The ranks are started by torch's own engine, the elastic agent behind torchrun
(torch.distributed.launcher.api.elastic_launch: c10d rendezvous, error files, ranks ended
together), on this node: each rank is a fresh process (forked from a clean forkserver, or
spawned; never forked from the caller, so CUDA can be used in it) that runs
``fn(rank, world_size, *args, **kwargs)`` inside an initialized default process group (gloo on
CPU, nccl with one GPU per rank when there are enough GPUs). The rendezvous store is a TCPStore
that the calling process opens on 127.0.0.1 with a port chosen by the OS and holds for the
whole run, so two pytest-xdist workers launching at the same moment can never race for one
port.

A rank that raises ends the run: every other rank is ended and the test sees a
DistributedError naming the rank, with the rank's own traceback; a rank that died without a
word (a signal, the OOM killer, os._exit) is named as the cause, its peers' errors as echoes.
A run that does not finish within ``timeout`` seconds (a deadlocked collective, a rank waiting
for a peer that died) kills every rank and raises DistributedTimeout naming the ranks that had
not finished. Ranks live in their own process group and watch their parent, so nothing they
started survives the run; they are not daemons, so a rank may start processes of its own
(DataLoader workers). `preload_for_ranks(modules)` has the ranks start with a lab's modules
already imported.

Lab code is written against torch.distributed only (``dist.all_reduce`` ...), never against this
module, so the same function runs unchanged under torchrun or srun, on one node or many: when the
current process already is a rank of a job (RANK and WORLD_SIZE in the environment),
run_distributed runs ``fn`` in this process on the job's group and gathers every rank's result
with ``all_gather_object``. ``current_job()`` describes that job (torchrun's variables, or an
srun step's), ``fresh_environment()`` is the environment without it (for a process that must not
join the job).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_hpml.distributed.job import Job, current_job, fresh_environment  # noqa: F401
    from pytest_hpml.distributed.launcher import preload_for_ranks, run_distributed  # noqa: F401
    from pytest_hpml.distributed.limits import (  # noqa: F401
        DistributedError,
        DistributedTimeout,
        choose_backend,
        max_world_size,
        rank_device,
        under_torchrun,
        validate_world_size,
    )

# Loaded on first use: the plugin's hook modules ask pytest_hpml.distributed.job (no torch)
# whether this process is a rank of a torchrun or srun job in every run, and importing this
# package must not import torch for that.
_EXPORTS = {
    "Job": "pytest_hpml.distributed.job",
    "current_job": "pytest_hpml.distributed.job",
    "fresh_environment": "pytest_hpml.distributed.job",
    "DistributedError": "pytest_hpml.distributed.limits",
    "DistributedTimeout": "pytest_hpml.distributed.limits",
    "choose_backend": "pytest_hpml.distributed.limits",
    "max_world_size": "pytest_hpml.distributed.limits",
    "preload_for_ranks": "pytest_hpml.distributed.launcher",
    "rank_device": "pytest_hpml.distributed.limits",
    "run_distributed": "pytest_hpml.distributed.launcher",
    "under_torchrun": "pytest_hpml.distributed.limits",
    "validate_world_size": "pytest_hpml.distributed.limits",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pytest_hpml.distributed' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return [*globals(), *__all__]
