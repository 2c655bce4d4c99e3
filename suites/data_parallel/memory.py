"""Running out of memory, on either side of the launcher.

In a rank: an out-of-memory error (CUDA's, or the CPU allocator's) is raised again as a
MemoryError naming the rank and the batch, so that the launcher ends every rank and the parent
can tell it from any other failure by its type name alone. On a CPU rank a memory budget
(RLIMIT_DATA: the process's heap and anonymous mappings) stands in for a GPU's memory, so that
question 1's sweep meets its limit at a batch size this machine can reach in seconds.

In the parent: ``launch`` runs the ranks and turns a rank's MemoryError into a
MemoryError of its own, which ``hpml.catch_out_of_memory()`` records as the finding.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from pytest_hpml.distributed import DistributedError, run_distributed

MIB = 2**20


#: How a failed allocation reads on a CPU: torch's allocator, oneDNN (a convolution whose
#: workspace cannot be allocated), the C++ runtime, a thread whose stack cannot be mapped.
#: A DataLoader worker's error comes back re-raised with the worker's message inside.
CPU_ALLOCATION_FAILURES = ("DefaultCPUAllocator: can't allocate memory", "out of memory",
                           "could not create a primitive", "std::bad_alloc",
                           "Cannot allocate memory", "can't start new thread")


def is_out_of_memory(exc: BaseException, under_budget: bool = False) -> bool:
    """CUDA's or Python's out-of-memory error, or the CPU allocator's; with ``under_budget``
    (a memory budget is in force), any of the ways a CPU allocation failure reads."""
    import torch

    if isinstance(exc, (MemoryError, torch.OutOfMemoryError)):
        return True
    text = str(exc)
    if not isinstance(exc, RuntimeError):
        return False
    if "DefaultCPUAllocator: can't allocate memory" in text or "out of memory" in text.lower():
        return True
    return under_budget and any(phrase in text for phrase in CPU_ALLOCATION_FAILURES)


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


def launch(fn: Callable[..., Any], world_size: int, *args: Any, device: str = "cpu",
           timeout: float = 300.0, **kwargs: Any) -> list[Any]:
    """run_distributed, with a rank's out-of-memory raised here as a MemoryError (every rank
    has been ended by then)."""
    try:
        return run_distributed(fn, world_size, *args, device=device, timeout=timeout, **kwargs)
    except DistributedError as err:
        if err.exception_type in ("MemoryError", "OutOfMemoryError"):
            raise MemoryError(str(err).splitlines()[0]) from err
        raise
