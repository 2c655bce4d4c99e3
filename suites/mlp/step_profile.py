"""Where one data-parallel training step spends its time, and the lab's time model.

profile_rank runs on every rank (through run_distributed or torchrun) and times the phases of
real training steps: copy of the rank's batch to the device; the forward pass's two GEMMs and
its element-wise work (bias, sigmoid, softmax), then the backward pass's three GEMMs and its
element-wise work, apart (the GEMMs through a timing wrapper around the same matmul the model
uses, so the model code is not duplicated); the wait for the slowest rank (a barrier), the
all_reduce of the packed gradients, and the SGD update. It then times all_reduce alone on a
buffer the size of all parameters.

The lab's time model for one step:  t = FLOPs / P_flops + bytes_h2d / P_pci + bytes_net / P_net,
and the attained rate FLOPs / t, to be read beside the measured step time.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from pytest_hpml import gpu_busy_wait
from suites.mlp import model
from suites.mlp.training import MLPConfig, matmul_for, pack, shard_bounds, unpack

PHASES = ("batch_to_device", "forward_gemm", "forward_elementwise", "backward_gemm",
          "backward_elementwise", "wait_for_peers", "all_reduce", "sgd_update", "step")
#: The passes whose GEMMs and element-wise work are timed apart (the lab's question 2.1).
PASSES = ("forward", "backward")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class PhaseTimer:
    """Seconds per phase, the device synchronized at each boundary so that work is attributed to
    the phase that issued it (this slows the step a little; it is a profile, not a benchmark).

    On a CPU, a phase is its wall-clock time. On a GPU, a synchronize leaves the GPU idle, so a
    phase timed from the host would include the host's time to queue its first kernel; instead
    a phase runs behind a GPU busy-wait (the plugin's, as hpml.time queues one) and is timed by
    CUDA events, which read when the GPU ran it. clock="host" keeps the wall clock for what
    the host itself waits on (a barrier) and for a phase that holds timed phases inside it.
    `wall` holds each phase's host time, brackets included, so a container's own share is its
    wall time minus that of the phases inside it. The GPU pieces are arguments so that the
    logic runs on a CPU with fakes.
    """

    #: GPU spinning queued ahead of a phase: longer than the host takes to queue a GEMM, an
    #: all_reduce or an SGD update (tens of microseconds), short beside a training step.
    BUSY_WAIT = 250e-6

    def __init__(self, device: torch.device, now: Callable[[], float] = time.perf_counter,
                 event: Callable[[], Any] | None = None,
                 synchronize: Callable[[], None] | None = None,
                 busy_wait: Callable[[float], Any] | None = None) -> None:
        self.device = device
        self.totals: dict[str, float] = {}
        self.wall: dict[str, float] = {}
        self._now = now
        self._events = device.type == "cuda" or event is not None
        if device.type == "cuda":  # pragma: no cover - GPU only, never run here
            event = event or (lambda: torch.cuda.Event(enable_timing=True))
            busy_wait = busy_wait or gpu_busy_wait(device)
        self._event, self._busy_wait = event, busy_wait
        self._synchronize = synchronize or (lambda: _sync(device))

    def __call__(self, phase: str, fn: Callable[..., Any], *args: Any,
                 clock: str = "device") -> Any:
        self._synchronize()
        started = self._now()
        if self._events and clock == "device":
            self._busy_wait(self.BUSY_WAIT)
            start, end = self._event(), self._event()
            start.record()
            out = fn(*args)
            end.record()
            self._synchronize()
            seconds = start.elapsed_time(end) / 1e3  # CUDA events read milliseconds
        else:
            out = fn(*args)
            self._synchronize()
            seconds = self._now() - started
        self.totals[phase] = self.totals.get(phase, 0.0) + seconds
        self.wall[phase] = self.wall.get(phase, 0.0) + self._now() - started
        return out


class TimedMatMul:
    """The model's matmul, timed per call under the phase `phase` (forward_gemm while the
    forward pass runs, backward_gemm in the backward pass); call 0 of a step is the first-layer
    forward GEMM."""

    def __init__(self, matmul: model.MatMul, timer: PhaseTimer, phase: str = "gemm") -> None:
        self.matmul = matmul
        self.timer = timer
        self.phase = phase
        self.calls: list[float] = []

    def __call__(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        before = self.timer.totals.get(self.phase, 0.0)
        out = self.timer(self.phase, self.matmul, a, b)
        self.calls.append(self.timer.totals[self.phase] - before)
        return out


def elementwise_seconds(timer: PhaseTimer, container: str = "forward_backward",
                        gemm: str = "gemm") -> float:
    """A pass outside its GEMMs: the container's host time minus its GEMMs' host time
    (brackets included). Its many small kernels are timed by the wall clock, launches
    included: that is where such work spends its time in a step."""
    return timer.wall[container] - timer.wall.get(gemm, 0.0)


def profile_rank(rank: int, world_size: int, X: torch.Tensor, labels: torch.Tensor,
                 config: MLPConfig, steps: int, allreduce_repeats: int,
                 device: str = "cpu") -> dict[str, object]:
    """Per-phase seconds of each of `steps` steps (after one warm-up step), and all_reduce alone.

    X, labels hold one global batch in host memory; each rank takes its rows, as in training.
    """
    dev = torch.device("cuda", torch.cuda.current_device()) if device == "cuda" else \
        torch.device("cpu")
    dtype = torch.float32
    params = model.init_params(config.hidden, dtype, dev, input_size=X.shape[1])
    lo, hi = shard_bounds(X.shape[0], world_size, rank)
    X_host, y_host = X[lo:hi].to(dtype), labels[lo:hi]
    if dev.type == "cuda":  # pinned host memory, the lab's suggested fix for slow copies (Q2.2)
        X_host, y_host = X_host.pin_memory(), y_host.pin_memory()
    scale = 1.0 / X.shape[0]
    per_step: dict[str, list[float]] = {phase: [] for phase in PHASES}
    first_gemm: list[float] = []
    for step in range(steps + 1):  # step 0 warms up (allocator, gloo buffers, kernels)
        timer = PhaseTimer(dev)
        matmul = TimedMatMul(matmul_for(config, dtype), timer, "forward_gemm")
        _sync(dev)
        start = time.perf_counter()
        X_dev = timer("batch_to_device", _to_device, X_host, dev)
        y_dev = timer("batch_to_device", _to_device, y_host, dev)
        cache = timer("forward", model.forward, params, X_dev, matmul, clock="host")
        matmul.phase = "backward_gemm"
        grads = timer("backward", model.backward, params, cache, y_dev, scale,
                      config.reg / world_size, matmul, clock="host")
        buffer = pack(grads)
        # A barrier first: time spent waiting for a slower rank is skew, not all_reduce transfer.
        timer("wait_for_peers", dist.barrier, clock="host")
        timer("all_reduce", dist.all_reduce, buffer)
        timer("sgd_update", model.sgd_step, params, unpack(buffer, params), config.lr)
        _sync(dev)
        step_time = time.perf_counter() - start
        if step == 0:
            continue
        totals = timer.totals
        per_step["batch_to_device"].append(totals["batch_to_device"])
        for name in PASSES:
            per_step[f"{name}_gemm"].append(totals[f"{name}_gemm"])
            per_step[f"{name}_elementwise"].append(
                elementwise_seconds(timer, name, f"{name}_gemm"))
        per_step["wait_for_peers"].append(totals["wait_for_peers"])
        per_step["all_reduce"].append(totals["all_reduce"])
        per_step["sgd_update"].append(totals["sgd_update"])
        per_step["step"].append(step_time)
        first_gemm.append(matmul.calls[0])

    buffer = torch.ones(params.count(), dtype=dtype, device=dev)
    allreduce_alone = []
    for repeat in range(allreduce_repeats + 1):
        alone = PhaseTimer(dev)
        alone("all_reduce", dist.all_reduce, buffer)
        if repeat:
            allreduce_alone.append(alone.totals["all_reduce"])
    batch_bytes = X_host.numel() * X_host.element_size() + y_host.numel() * y_host.element_size()
    return {"rank": rank, "rows": hi - lo, "phases": per_step, "first_gemm": first_gemm,
            "allreduce_alone": allreduce_alone, "batch_bytes": batch_bytes,
            "param_bytes": buffer.numel() * buffer.element_size()}


def _to_device(t: torch.Tensor, dev: torch.device) -> torch.Tensor:
    return t.to(dev, non_blocking=True)


def busbw(algbw: float, world_size: int) -> float:
    """Bus bandwidth of an all_reduce (nccl-tests' convention): algbw * 2 (N - 1) / N."""
    return algbw * 2 * (world_size - 1) / world_size


@dataclass
class TimeModel:
    """t = FLOPs / P_flops + bytes_h2d / P_pci + bytes_net / P_net (the lab's roofline-style
    model of one step). A rate of None drops its term (no PCIe between host and CPU)."""

    flops: float
    bytes_h2d: float
    bytes_net: float
    p_flops: float
    p_pci: float | None
    p_net: float | None

    def step_time(self) -> float:
        t = self.flops / self.p_flops
        if self.p_pci:
            t += self.bytes_h2d / self.p_pci
        if self.p_net:
            t += self.bytes_net / self.p_net
        return t

    def attained_flops(self) -> float:
        return self.flops / self.step_time()


def median(samples: list[float]) -> float:
    return statistics.median(samples)
