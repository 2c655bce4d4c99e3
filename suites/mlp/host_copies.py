"""Copies of one rank's batch from host memory, pageable against pinned (the lab's question 2.2
suggests pinned memory for slow host-to-device copies; 2.4 measures P_pci).

On a GPU, pinned (page-locked) host memory lets the copy engine read the batch directly by DMA;
from pageable memory the driver first copies it into a pinned staging buffer. A CPU-only
machine has no device to copy to: its batch copy is host memory to host memory, and page-locking
the source (mlock, what cudaHostAlloc does besides registering the pages with the driver)
changes nothing for the CPU's own loads. Measured side by side, that is the CPU's answer: the
gain of pinned memory belongs to the DMA engine.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
from collections.abc import Iterator

import torch

_LIBC = ctypes.CDLL(None, use_errno=True)


class PageLockRefused(OSError):
    """mlock refused (RLIMIT_MEMLOCK too small, or not permitted): the message says which."""


@contextlib.contextmanager
def page_locked(t: torch.Tensor) -> Iterator[torch.Tensor]:
    """The tensor's pages locked in RAM (mlock) for the block, unlocked after it."""
    if t.device.type != "cpu" or not t.is_contiguous():
        raise ValueError("page_locked needs a contiguous CPU tensor")
    address = ctypes.c_void_p(t.data_ptr())
    length = ctypes.c_size_t(t.numel() * t.element_size())
    if _LIBC.mlock(address, length) != 0:
        errno = ctypes.get_errno()
        raise PageLockRefused(errno, f"mlock of {length.value} bytes refused: "
                                     f"{os.strerror(errno)} (see ulimit -l)")
    try:
        yield t
    finally:
        _LIBC.munlock(address, length)
