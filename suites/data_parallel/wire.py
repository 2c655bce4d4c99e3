"""What goes over the wire: the bytes of every collective torch.distributed is asked to run,
counted by wrapping its functions for the duration of a block, by phase.

DDP (and SyncBatchNorm, and the lab's comm hook) call the collectives through the
``torch.distributed`` module at call time, so a wrapper installed there sees:

    _broadcast_coalesced   parameters and buffers from rank 0 at construction; buffers (BatchNorm
                           running statistics) before every forward when broadcast_buffers is on
    all_reduce             the gradient buckets (from the comm hook); SyncBatchNorm's backward
    all_gather*            SyncBatchNorm's forward (per-rank mean, inverse std and count)

A collective's size is its payload as nccl-tests counts it: the tensor all-reduced or broadcast,
the gathered output of an all-gather. What C++ issues on its own (DDP checking at construction
that every rank has the same parameter shapes) is not seen, and is metadata, not training data.
"""

from __future__ import annotations

import contextlib
import functools
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.distributed as dist


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def _tensors_bytes(tensors: Any) -> int:
    return sum(_nbytes(t) for t in tensors)


#: collective -> payload bytes, from its call's arguments (positional or by keyword).
PAYLOAD: dict[str, Callable[..., int]] = {
    "all_reduce": lambda tensor, *a, **k: _nbytes(tensor),
    "broadcast": lambda tensor, *a, **k: _nbytes(tensor),
    "all_gather": lambda tensor_list, tensor, *a, **k: _tensors_bytes(tensor_list),
    "all_gather_into_tensor": lambda output_tensor, *a, **k: _nbytes(output_tensor),
    "all_gather_single": lambda output_tensor, *a, **k: _nbytes(output_tensor),
    "reduce_scatter_tensor": lambda output, input, *a, **k: _nbytes(input),
    "_broadcast_coalesced": lambda process_group, tensors, *a, **k: _tensors_bytes(tensors),
}


class WireCounter:
    """Bytes and calls per (phase, collective). Set ``phase`` as the run moves on
    ("construction", "step", "evaluation" ...); only calls inside ``installed()`` count."""

    def __init__(self) -> None:
        self.phase = "setup"
        self.bytes: Counter[tuple[str, str]] = Counter()
        self.calls: Counter[tuple[str, str]] = Counter()

    def count(self, collective: str, nbytes: int) -> None:
        self.bytes[(self.phase, collective)] += nbytes
        self.calls[(self.phase, collective)] += 1

    def phase_bytes(self, phase: str) -> dict[str, int]:
        return {c: n for (p, c), n in self.bytes.items() if p == phase}

    def _wrap(self, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
        payload = PAYLOAD[name]

        @functools.wraps(original)
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.count(name, payload(*args, **kwargs))
            return original(*args, **kwargs)

        return counted

    @contextlib.contextmanager
    def installed(self) -> Iterator[WireCounter]:
        originals = {name: getattr(dist, name) for name in PAYLOAD if hasattr(dist, name)}
        try:
            for name, original in originals.items():
                setattr(dist, name, self._wrap(name, original))
            yield self
        finally:
            for name, original in originals.items():
                setattr(dist, name, original)
