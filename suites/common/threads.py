"""CPU training on one intra-op thread, for a block.

The quick profile runs on 2 cores shared with xdist workers and other users: there, two
intra-op threads per process each run several times slower than one (an op waits for its
slowest thread, and one of them is often descheduled). GPU blocks are left as they are.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


@contextlib.contextmanager
def one_cpu_thread(device: torch.device) -> Iterator[None]:
    """One intra-op thread inside the block when `device` is the CPU; restored after it."""
    if device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
