"""A DDP communication hook that all-reduces each gradient bucket as DDP's default hook does and
times it: the all-reduce itself, measured, instead of inferred from the data loader.

DDP hands a bucket to the hook as soon as all its gradients exist, during backward, so the
all-reduces overlap the gradients still being computed. The hook stamps each bucket when it is
handed over (on a GPU: a CUDA event on the backward stream, i.e. when its gradients are done)
and when its reduced values are ready (the future's callback; on a GPU the callback's stream
waits for the all-reduce). A bucket's interval therefore includes the time it waited behind the
previous bucket; the step's communication time is the union of its buckets' intervals
(instruments.covered), the time during which some all-reduce was in flight.

    timer = AllReduceTimer(clock, world_size)
    ddp.register_comm_hook(timer, timed_allreduce_hook)
    timer.begin_step(); ...backward...; buckets = timer.end_step()
"""

# No `from __future__ import annotations` here: DDP checks the hook's annotations as objects
# (dist.GradBucket, torch.futures.Future[torch.Tensor]) and refuses them as strings.
import threading
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass
class BucketRecord:
    index: int  # DDP's bucket index (buckets are rebuilt after the first step)
    nbytes: int  # the flattened gradients all-reduced: numel x element size
    start: Any  # clock marks until resolved, then seconds from the step's start
    end: Any


class AllReduceTimer:
    """The hook's state: the buckets of the current step, in the order they finished."""

    def __init__(self, clock: Any, world_size: int) -> None:
        self.clock = clock
        self.world_size = world_size
        self._lock = threading.Lock()  # gloo runs callbacks on its own threads
        self._buckets: list[BucketRecord] = []

    def begin_step(self) -> None:
        with self._lock:
            self._buckets = []

    def add(self, record: BucketRecord) -> None:
        with self._lock:
            self._buckets.append(record)

    def end_step(self) -> list[BucketRecord]:
        """This step's buckets (marks, not yet seconds). Call after backward returned: DDP
        waits for every bucket's future before backward ends."""
        with self._lock:
            buckets, self._buckets = self._buckets, []
        return buckets


def timed_allreduce_hook(state: AllReduceTimer,
                         bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP's default all-reduce (average over ranks), with the bucket's interval recorded."""
    buffer = bucket.buffer()
    # Averaging before the sum, as DDP's default hook does (keeps fp16 sums in range).
    buffer.div_(state.world_size)
    start = state.clock.mark()
    future = dist.all_reduce(buffer, async_op=True).get_future()
    index, nbytes = bucket.index(), buffer.numel() * buffer.element_size()

    def reduced(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        state.add(BucketRecord(index, nbytes, start, state.clock.mark()))
        return fut.value()[0]

    return future.then(reduced)
