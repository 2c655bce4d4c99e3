"""Out-of-memory findings: which exceptions are an allocator's out-of-memory error, and giving
the device's cached memory back after one (a batch size that does not fit is a finding that
the test records, and the next case must start with the memory free)."""

from __future__ import annotations

import gc


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is an allocator's out-of-memory error: torch's (CUDA), Python's
    MemoryError, or a failed CPU allocation (a RuntimeError in the allocator's words)."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            return True
    except (ImportError, AttributeError):
        pass
    # CPU allocations that fail surface as RuntimeError with the allocator's words.
    text = str(exc)
    return isinstance(exc, RuntimeError) and ("out of memory" in text.lower()
                                              or "DefaultCPUAllocator: can't allocate" in text)


def free_device_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_initialized():  # pragma: no cover - GPU only
            torch.cuda.empty_cache()
    except ImportError:
        pass
