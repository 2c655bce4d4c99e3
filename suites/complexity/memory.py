"""Actual memory of one training step (SGD with momentum), and where it goes.

CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``; the caching
allocator counts every block torch hands out. On both devices the peak is taken above what was
allocated when the step started, and the blocks the step needs from before (parameters, momentum
buffers, the batch) are added from their sizes, so leftovers of other tests never count.

CPU has no such counter, so the step runs under ``torch.profiler`` with ``profile_memory=True``.
Why the profiler: with memory profiling on, c10's CPU allocator itself reports every allocation
and free (pointer, signed size), including buffers an op allocates and frees internally, which a
TorchDispatchMode watching op outputs would never see; and the report comes from the allocator,
not from reconstructing tensor and storage lifetimes in Python. Summing the signed sizes in time
order gives the live bytes allocated during the step; its maximum is the peak. Frees of blocks
allocated before the profiled region are ignored (their allocation is not in the stream). The
tests check the method on allocations of known size.

The allocation stream is read through the profiler's experimental event tree (private API,
torch >= 2.0): the public ``prof.events()`` only gives each op's net memory, which hides an
op's internal high-water mark.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


def unique_storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Memory held by tensors, each underlying buffer counted once (views share a buffer)."""
    seen: dict[int, int] = {}
    for t in tensors:
        storage = t.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


def cpu_peak_allocated(fn: Callable[[], Any]) -> int:
    """Peak bytes allocated by torch's CPU allocator while ``fn`` runs, above what was live before
    it started (0 if it allocates nothing). Blocks still live at the end count as well."""
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    allocations = []  # (time, ptr, signed size) in recording order
    pending = list(reversed(prof.profiler.kineto_results.experimental_event_tree()))
    while pending:  # pre-order walk: an op's allocations come in the order they were recorded
        node = pending.pop()
        pending.extend(reversed(node.children))
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            fields = node.extra_fields
            allocations.append((node.start_time_ns, fields.ptr, fields.alloc_size))
    # Stable sort on time alone: equal timestamps keep recording order (a free never jumps
    # ahead of its own allocation), and threads interleave by time.
    allocations.sort(key=lambda event: event[0])
    live_blocks: set[int] = set()
    live = peak = 0
    for _, ptr, size in allocations:
        if size > 0:
            live_blocks.add(ptr)
        elif ptr in live_blocks:
            live_blocks.discard(ptr)
        else:
            continue  # freed here but allocated before the profiled region
        live += size
        peak = max(peak, live)
    return peak


@dataclass
class StepMemory:
    peak: int  # bytes: everything live at the step's high-water mark
    parameters: int
    gradients: int
    optimizer_state: int
    activations: int  # tensors autograd saved for backward, less parameters and the batch
    batch: int  # input images and labels
    method: str

    @property
    def unattributed(self) -> int:
        """peak - the parts. Gradients and activations are never all live at once (backward
        frees activations as it creates gradients), so this may be negative; workspace and
        temporaries make it positive."""
        return self.peak - (
            self.parameters + self.gradients + self.optimizer_state + self.activations + self.batch
        )


def make_sgd(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def training_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor
) -> None:
    optimizer.zero_grad(set_to_none=True)
    F.cross_entropy(model(images), labels).backward()
    optimizer.step()


class SavedActivations:
    """Counts the bytes autograd saves for backward (the activations) while active, as
    saved_tensors_hooks see them. Parameters and the input batch, which autograd also saves,
    are excluded. Only pointers and sizes are kept, so the hook extends no tensor's life; all
    saved tensors of one forward are alive together, so their buffers are distinct."""

    def __init__(self, excluded: list[torch.Tensor]) -> None:
        self._excluded = {t.untyped_storage().data_ptr() for t in excluded}
        self._buffers: dict[int, int] = {}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)

    def _pack(self, t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in self._excluded:
            self._buffers[storage.data_ptr()] = storage.nbytes()
        return t

    @property
    def bytes(self) -> int:
        return sum(self._buffers.values())

    def __enter__(self) -> SavedActivations:
        self._hooks.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._hooks.__exit__(*exc)


def measure_step_memory(
    model: nn.Module, images: torch.Tensor, labels: torch.Tensor
) -> StepMemory:
    """Peak memory of a steady-state training step. A warm-up step first creates the momentum
    buffers (as in every step of a real run but the first) and measures the activations."""
    model.train()
    optimizer = make_sgd(model)
    params = list(model.parameters())
    with SavedActivations(excluded=[*params, images, labels]) as activations:
        training_step(model, optimizer, images, labels)
    optimizer.zero_grad(set_to_none=True)

    state = [t for s in optimizer.state.values() for t in s.values() if isinstance(t, torch.Tensor)]
    live_before = unique_storage_bytes([*params, *state, images, labels])

    def step() -> None:
        training_step(model, optimizer, images, labels)

    if images.device.type == "cuda":
        peak_above_start = _cuda_peak_allocated(step, images.device)
        method = "torch.cuda.max_memory_allocated"
    else:
        peak_above_start, method = cpu_peak_allocated(step), "torch.profiler CPU allocator events"
    peak = live_before + peak_above_start
    gradients = unique_storage_bytes([p.grad for p in params if p.grad is not None])
    optimizer.zero_grad(set_to_none=True)
    return StepMemory(
        peak=peak,
        parameters=unique_storage_bytes(params),
        gradients=gradients,
        optimizer_state=unique_storage_bytes(state),
        activations=activations.bytes,
        batch=unique_storage_bytes([images, labels]),
        method=method,
    )


def _cuda_peak_allocated(step: Callable[[], None], device: torch.device | None = None) -> int:
    """Like cpu_peak_allocated: the high-water mark above what was allocated when the step
    started, so tensors other tests left alive in this process do not count. The counters are
    those of `device` (the step's, which need not be the current device)."""
    # Work queued before the step frees its memory in stream order: let it finish first.
    torch.cuda.synchronize(device)
    # The peak restarts at what is allocated now, not at the process's high-water mark so far.
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    step()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - start
