"""Questions 2.1 to 2.5: profile of one data-parallel training step and the lab's time model.

Per phase: copy of the rank's batch to the device, the forward pass's GEMMs and element-wise
work, the backward pass's, the all_reduce, the SGD update; the forward pass against the backward
pass (2.1). Then the FLOPs of the first-layer forward GEMM (2 D H B) and the rate it attains,
host-to-device bandwidth from pinned memory (GPU only: on a CPU there is no copy; the batch copy
from pageable and from pinned memory on either device is test_batch_copy_from_pageable_and_
pinned_memory), all_reduce algbw and busbw, and the time model
    t = FLOPs / P_flops + bytes_h2d / P_pci + bytes_net / P_net
with every P measured here, beside the measured step time.
"""

from __future__ import annotations

import contextlib

import pytest
import torch

from pytest_hpml.distributed import run_distributed
from suites.common.data import load
from suites.common.jobs import skip_unless_the_job_has
from suites.mlp import model
from suites.mlp.host_copies import PageLockRefused, page_locked
from suites.mlp.step_profile import (
    PASSES,
    PHASES,
    PhaseTimer,
    TimeModel,
    busbw,
    elementwise_seconds,
    median,
    profile_rank,
)
from suites.mlp.training import MLPConfig, pixel_intensities

pytestmark = [pytest.mark.mlp, pytest.mark.data_parallel]

SETUP = {"quick": {"batch": 1000, "hidden": 128, "ranks": 2, "steps": 8, "allreduce_repeats": 20},
         "full": {"batch": 3000, "hidden": 512, "ranks": 4, "steps": 20,
                  "allreduce_repeats": 50}}
# Seed report (V100 node, MPI + hand-written CUDA, H = 512, B = 3000, fp32): reference only.
PUBLISHED = [("first_gemm (X W0^T) in step", "time", 446e-6, "s"),
             ("first_gemm (X W0^T) in step", "achieved_flops", 5.4e12, "FLOP/s"),
             ("h2d", "h2d_bandwidth", 4.26e9, "B/s"),
             ("all_reduce alone", "algbw", 6.1e9, "B/s")]


# How each phase is timed, where it is not obvious.
ELEMENTWISE_ON_GPU = ("*_elementwise: wall time of the pass outside its GEMMs, launches included "
                      "(many small kernels: launching is their cost); the other GPU phases: "
                      "CUDA events behind a GPU busy-wait")
PHASE_NOTES = {
    ("forward_elementwise", "cuda"): ELEMENTWISE_ON_GPU,
    ("backward_elementwise", "cuda"): ELEMENTWISE_ON_GPU,
    ("wait_for_peers", "cuda"): "wait_for_peers: wall time of the barrier (the host waits)",
    ("step", "cuda"): "step: wall time, the profile's synchronizations and busy-waits included",
}


def _ranks(profile: str, device: torch.device) -> int:
    ranks = SETUP[profile]["ranks"]
    if device.type == "cuda":
        ranks = min(ranks, torch.cuda.device_count())
    return ranks


def _h2d_bandwidth(hpml, nbytes: int) -> dict[str, float]:  # pragma: no cover - GPU only
    """Pageable and pinned host memory to the device, the batch's size. Never run on CPU."""
    dst = torch.empty(nbytes, dtype=torch.uint8, device=hpml.device)
    rates = {}
    for memory in ("pageable", "pinned"):
        src = torch.empty(nbytes, dtype=torch.uint8)
        if memory == "pinned":
            src = src.pin_memory()
        with hpml.row(phase=f"h2d_{memory}") as row:
            timing = row.time(dst.copy_, src, non_blocking=(memory == "pinned"), name="time")
            rates[memory] = row.record_bandwidth("h2d_bandwidth", nbytes, timing).value
    return rates


@pytest.mark.hpml(min_samples=10, max_time=2.0)
@pytest.mark.hpml_devices("cpu", "cuda")
def test_training_step_profile(hpml, device, data_root, mnist_dataset):
    hpml.experiment = "MLP: profile of one data-parallel training step"
    setup = SETUP[hpml.profile]
    ranks = _ranks(hpml.profile, hpml.device)
    config = MLPConfig(hidden=setup["hidden"], batch_size=setup["batch"], lr=1e-2)
    data = load(mnist_dataset, "train", root=data_root, limit=setup["batch"])
    X, y = pixel_intensities(data), data.labels
    kind = "cuda" if hpml.device.type == "cuda" else "cpu"
    hpml.param(data=data.source, ranks=ranks, hidden=config.hidden, batch=config.batch_size)

    skip_unless_the_job_has(ranks)
    out = run_distributed(profile_rank, ranks, X, y, config, setup["steps"],
                          setup["allreduce_repeats"], kind, device=kind)[0]
    phases = out["phases"]
    step = median(phases["step"])
    for phase in PHASES:
        with hpml.row(phase=phase) as row:
            row.record("time", median(phases[phase]), unit="s", better="lower",
                       samples=phases[phase], note=PHASE_NOTES.get((phase, kind)))
            row.record("share_of_step", 100 * median(phases[phase]) / step, unit="%", better=None)

    rows = out["rows"]
    gemm_flops = model.gemm_flops(rows, config.hidden)
    _forward_versus_backward(hpml, phases, gemm_flops, step)

    # First-layer forward GEMM (2 D H B at one rank's B rows): inside the steps, where the time
    # model needs it, and alone in this process under the plugin's adaptive timer.
    first = gemm_flops["forward_layer0"]
    with hpml.row(phase="first_gemm (X W0^T) in step") as row:
        row.setting("flops", first, unit="FLOP")
        row.record("time", median(out["first_gemm"]), unit="s", better="lower",
                   samples=out["first_gemm"])
        p_flops = first / median(out["first_gemm"])
        row.record("achieved_flops", p_flops, unit="FLOP/s", better="higher")
    params = model.init_params(config.hidden, torch.float32, hpml.device)
    X_local = X[:rows].to(hpml.device)
    with hpml.row(phase="first_gemm (X W0^T) alone, hpml.time") as row:
        row.setting("flops", first, unit="FLOP")
        timing = row.time(torch.matmul, X_local, params.W[0].T, name="time")
        row.record_flops("achieved_flops", first, timing)

    p_pci = None
    if hpml.device.type == "cuda":  # pragma: no cover - never run on the CPU-only machine
        p_pci = _h2d_bandwidth(hpml, out["batch_bytes"])["pinned"]

    nbytes = out["param_bytes"]
    algbw = nbytes / median(out["allreduce_alone"]) if ranks > 1 else None
    with hpml.row(phase="all_reduce alone") as row:
        row.setting("bytes", nbytes, unit="B")
        row.record("time", median(out["allreduce_alone"]), unit="s", better="lower",
                   samples=out["allreduce_alone"])
        if algbw is not None:
            row.record("algbw", algbw, unit="B/s", better="higher")
            row.record("busbw", busbw(algbw, ranks), unit="B/s", better="higher")

    step_flops = sum(gemm_flops.values())
    time_model = TimeModel(flops=step_flops, bytes_h2d=out["batch_bytes"], bytes_net=nbytes,
                           p_flops=p_flops, p_pci=p_pci, p_net=algbw)
    with hpml.row(phase="time model") as row:
        row.setting("flops", step_flops, unit="FLOP")
        row.record("modeled_step_time", time_model.step_time(), unit="s",
                   note="FLOPs/P_flops + bytes_h2d/P_pci + bytes_net/P_net" +
                   ("" if p_pci else " (no host-to-device term on CPU)"))
        row.record("measured_step_time", step, unit="s", better="lower")
        row.record("attained_flops_model", time_model.attained_flops(), unit="FLOP/s")
        row.record("attained_flops_measured", step_flops / step, unit="FLOP/s")
    # The seed report's figures, in the same columns, labelled by the phase name.
    for phase in dict.fromkeys(p for p, *_ in PUBLISHED):  # one row per phase, in order
        with hpml.row(phase=f"{phase} [published: seed report, V100, MPI]") as row:
            for name, value, unit in ((n, v, u) for p, n, v, u in PUBLISHED if p == phase):
                row.reference(name, value, unit=unit,
                              source="seed report 000, V100 node, MPI + CUDA")

    # The phases are disjoint parts of each step: a timer that counted some work twice (or a
    # phase that ran outside the step) would add up to more than the step.
    for i, total in enumerate(phases["step"]):
        parts = sum(phases[p][i] for p in PHASES if p != "step")
        assert 0 < parts <= total * 1.0001, f"step {i}: phases {parts:.3g} s > step {total:.3g} s"


@pytest.mark.hpml_devices("cpu", "cuda")
def test_batch_copy_from_pageable_and_pinned_memory(hpml, device):
    """Questions 2.2 and 2.4: one rank's batch copied from pageable and from pinned host memory.
    On a GPU, to the device (P_pci); on a CPU, into host memory, the source pageable or
    page-locked with mlock (host_copies.py says why that is the CPU's answer)."""
    hpml.experiment = "MLP Q2.2, Q2.4: copy of one rank's batch, pageable vs pinned host memory"
    setup = SETUP[hpml.profile]
    rows = setup["batch"] // _ranks(hpml.profile, hpml.device)
    batch = torch.rand(rows, model.INPUT_SIZE, generator=torch.Generator().manual_seed(0))
    nbytes = batch.numel() * batch.element_size()
    on_gpu = hpml.device.type == "cuda"
    hpml.param(copy="host to GPU" if on_gpu else "host to host (CPU: no device to copy to)",
               rows=rows)
    hpml.setting("bytes", nbytes, unit="B")
    rates = {}
    for memory in ("pageable", "pinned"):
        with hpml.row(memory=memory) as row, contextlib.ExitStack() as held:
            source = batch.clone()
            if memory == "pinned":
                if on_gpu:  # pragma: no cover - GPU only, never run on the CPU-only machine
                    source = source.pin_memory()
                else:
                    try:
                        held.enter_context(page_locked(source))
                    except PageLockRefused as refused:
                        row.param(status=f"not measured: {refused}")
                        continue
                    row.param(status="page-locked with mlock")
            target = torch.empty(batch.shape, device=hpml.device)
            timing = row.time(target.copy_, source, non_blocking=on_gpu and memory == "pinned",
                              name="time")
            rates[memory] = row.record_bandwidth("copy_bandwidth", nbytes, timing).value
            row.check_close(target, batch, rtol=0, atol=0)  # the timed copies' own result
    if len(rates) == 2:
        hpml.record("pinned_over_pageable", rates["pinned"] / rates["pageable"], better=None,
                    note="pinned_over_pageable: bandwidth from pinned over from pageable memory "
                         "(about 1 on a CPU: only a DMA engine gains from pinned pages)")
    with hpml.row(memory="pageable [published: seed report 000, V100, MPI]") as row:
        row.reference("copy_bandwidth", 4.26e9, unit="B/s",
                      source="seed report 000, V100 node, MPI + CUDA (its P_pci)")


def _forward_versus_backward(hpml, phases: dict[str, list[float]], gemm_flops: dict[str, int],
                             step: float) -> None:
    """Question 2.1: the forward pass against the backward pass, each split into its GEMMs and
    its element-wise work. The FLOPs are the GEMMs' (2 m n k each): about 2DHB in either pass,
    since the backward pass never forms the input gradient dX."""
    times = {}
    for name in PASSES:
        per_step = [g + e for g, e in zip(phases[f"{name}_gemm"], phases[f"{name}_elementwise"],
                                          strict=True)]
        flops = sum(v for k, v in gemm_flops.items() if k.startswith(name))
        gemm = median(phases[f"{name}_gemm"])
        times[name] = median(per_step)
        with hpml.row(phase=f"{name} pass (GEMMs + element-wise)") as row:
            row.setting("flops", flops, unit="FLOP")
            row.record("time", times[name], unit="s", better="lower", samples=per_step)
            row.record("share_of_step", 100 * times[name] / step, unit="%", better=None)
            row.record("gemm_share", 100 * gemm / times[name], unit="%", better=None,
                       note="gemm_share: the pass's GEMMs over the whole pass")
            row.record("achieved_flops", flops / gemm, unit="FLOP/s", better="higher",
                       note="achieved_flops of a pass: its GEMM FLOPs over its GEMMs' time")
            if name == "backward":
                row.record("backward_over_forward", times["backward"] / times["forward"],
                           better=None, note="backward_over_forward: the backward pass's time "
                           "over the forward pass's, for GEMM FLOPs about equal (2DHB each)")
    fwd = sum(v for k, v in gemm_flops.items() if k.startswith("forward"))
    bwd = sum(v for k, v in gemm_flops.items() if k.startswith("backward"))
    # The lab's premise: the two passes do about the same GEMM work.
    assert 0.9 < bwd / fwd < 1.2, (fwd, bwd)


# -- the phase timer on a GPU, with a fake one -----------------------------------------------------

class FakeStream:
    """A GPU stream in miniature, in seconds: the host pays LAUNCH to queue a kernel, which starts
    once queued and once the GPU is free; an event is stamped when the GPU reaches it."""

    LAUNCH = 20e-6

    def __init__(self) -> None:
        self.host = 0.0
        self.gpu_free = 0.0

    def kernel(self, seconds: float) -> None:
        self.host += self.LAUNCH
        self.gpu_free = max(self.gpu_free, self.host) + seconds

    def synchronize(self) -> None:
        self.host = max(self.host, self.gpu_free)

    def event(self) -> FakeEvent:
        return FakeEvent(self)


class FakeEvent:
    def __init__(self, stream: FakeStream) -> None:
        self.stream, self.at = stream, None

    def record(self) -> None:
        self.at = max(self.stream.gpu_free, self.stream.host)

    def elapsed_time(self, end: FakeEvent) -> float:
        return (end.at - self.at) * 1e3  # milliseconds, as CUDA events


def _fake_gpu_timer(stream: FakeStream) -> PhaseTimer:
    return PhaseTimer(torch.device("cpu"), now=lambda: stream.host, event=stream.event,
                      synchronize=stream.synchronize, busy_wait=stream.kernel)


def test_a_gpu_phase_is_the_kernels_time_not_its_launch_on_an_idle_gpu():
    # After a synchronize the GPU is idle: timed from the host, a 2 ms GEMM read 2.02 ms (its
    # launch included); behind the busy-wait, its events read the kernel alone.
    stream = FakeStream()
    timer = _fake_gpu_timer(stream)
    timer("gemm", stream.kernel, 2e-3)
    timer("gemm", stream.kernel, 2e-3)
    assert timer.totals["gemm"] == pytest.approx(4e-3, abs=1e-12)
    assert timer.wall["gemm"] > 4e-3 + 2 * PhaseTimer.BUSY_WAIT  # what the host spent on it


def test_elementwise_work_is_the_container_minus_its_gemms():
    stream = FakeStream()
    timer = _fake_gpu_timer(stream)

    def forward_backward() -> None:
        stream.kernel(1e-3)  # element-wise work before the GEMM ...
        timer("gemm", stream.kernel, 2e-3)
        stream.kernel(1e-3)  # ... and after it

    timer("forward_backward", forward_backward, clock="host")
    assert timer.totals["gemm"] == pytest.approx(2e-3, abs=1e-12)
    assert elementwise_seconds(timer, "forward_backward", "gemm") == elementwise_seconds(timer)
    # The two element-wise kernels and their launches; none of the GEMM's busy-wait.
    assert elementwise_seconds(timer) == pytest.approx(2e-3 + 2 * FakeStream.LAUNCH, abs=1e-12)


def test_host_phases_keep_the_wall_clock():
    stream = FakeStream()
    timer = _fake_gpu_timer(stream)
    timer("wait_for_peers", lambda: setattr(stream, "host", stream.host + 5e-3), clock="host")
    assert timer.totals["wait_for_peers"] == pytest.approx(5e-3)
