"""Each CUDA piece of pytest-hpml and its labs once, quickly: the first stage tools/gpu_proof.py
runs on a GPU machine, so that a broken piece is named before the labs' long runs.

    python -m pytest tools/gpu_smoke.py --hpml-report      # on a GPU machine; skipped elsewhere

CUDA events against the wall clock; the busy-wait's spin rate and span; a short kernel timed
without its launch path; a cold L2 against a warm one; the SM clock and utilization through
NVML; unified (managed) memory written by the CPU and the GPU; pinned host memory copied
asynchronously, against pageable; the handout's CUDA C++ program (suites/vector_add) in both
memory modes and its three launch configurations. Every check records what it measured, so the
report shows the figures a failure is judged by.
"""

from __future__ import annotations

import statistics
import time

import pytest
import torch

import pytest_hpml

pytestmark = pytest.mark.hpml_devices("cuda")


def _wall_per_call(fn, calls: int = 20, synchronize_each: bool = False) -> float:
    """Seconds per call on the host's clock: `calls` calls queued, then one synchronize (or
    one after each call)."""
    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        fn()
        if synchronize_each:
            torch.cuda.synchronize()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / calls


def _event_seconds(fn) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3


def _graph_seconds_per_call(fn, calls: int = 100) -> float:
    """Seconds per call of `fn` replayed back to back from a CUDA graph: the kernel with a warm
    cache and no launch path (a pair of events around one launched call also times the host's
    launch, several microseconds: on an H200 that read 19 us for a 16 MB sum timed at 15 us
    cold behind the plugin's busy-wait)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # capture wants its warm-up off the default stream
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    return statistics.median(_event_seconds(graph.replay) for _ in range(10)) / calls


def test_cuda_events_agree_with_the_wall_clock(hpml, device):
    # A GEMM of a few ms: queued back to back, the host's clock over many calls is the GPU's.
    a = torch.randn(8192, 8192, device=device, dtype=torch.float16)
    timing = hpml.time(torch.matmul, a, a)
    wall = _wall_per_call(lambda: torch.matmul(a, a))
    hpml.record("wall_time_per_call", wall, unit="s", better="lower")
    assert timing.device.startswith("cuda") and timing.n >= 3
    assert 0.7 * wall < timing.median < 1.3 * wall, (timing, wall)


def test_the_busy_wait_lasts_at_least_what_it_is_asked(hpml, device):
    busy_wait = pytest_hpml.gpu_busy_wait(hpml.device)
    hpml.record("spin_rate", busy_wait.cycles_per_second, unit="Hz", better=None)
    for asked in (1e-4, 1e-3, 1e-2):
        with hpml.row(asked=asked) as row:
            spanned = _event_seconds(lambda asked=asked: busy_wait(asked))
            row.record("spanned", spanned, unit="s", better=None)
        # Calibrated at the loaded clock: a busy-wait never ends early (a slower clock only
        # makes it longer); two events around it add a few microseconds.
        assert 0.98 * asked <= spanned < 3 * asked + 20e-6, (asked, spanned)


def test_a_short_kernel_is_timed_without_its_launch_path(hpml, device):
    x = torch.zeros(4096, device=device)
    timing = hpml.time(x.add_, 1.0)
    synced = _wall_per_call(lambda: x.add_(1.0), calls=200, synchronize_each=True)
    hpml.record("launch_and_synchronize", synced, unit="s", better="lower")
    # Behind the busy-wait, a sample is the kernel; without it, the host's launch path.
    assert timing.median < synced, (timing, synced)
    assert not [w for w in timing.warnings if "busy-wait" in w and "kept" in w], timing.warnings


@pytest.mark.hpml(cold_l2=True)
def test_a_cold_l2_is_slower_than_a_warm_one(hpml, device):
    buffer = torch.ones(4 * 2**20, device=device)  # 16 MB: held in an H100's 50 MB L2
    cold = hpml.time(buffer.sum, name="cold_read")
    warm = _graph_seconds_per_call(buffer.sum)
    hpml.record("warm_read", warm, unit="s", better="lower")
    assert cold.cold_l2 and cold.median > warm, (cold, warm)


def test_nvml_reads_the_sm_clock_and_utilization_under_load(hpml, device):
    pytest.importorskip("pynvml", reason="nvidia-ml-py is not installed (pip install "
                                         "nvidia-ml-py): no SM clock, no utilization")
    a = torch.randn(8192, 8192, device=device, dtype=torch.float16)
    with hpml.sample_utilization(interval=0.05) as sampler:
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            torch.matmul(a, a)
            torch.cuda.synchronize()
    assert max(sampler.values.get("sm_clock") or [0.0]) > 500e6, sampler.values
    assert max(sampler.values.get("gpu_util") or [0.0]) > 0, sampler.values
    timing = hpml.time(torch.matmul, a, a, name="gemm")
    assert not [w for w in timing.warnings if "throttling not checked" in w], timing.warnings


def test_unified_memory_is_shared_by_the_cpu_and_the_gpu(hpml, device):
    from suites.vector_add.cuda_memory import cuda_floats

    n = 1 << 20
    with cuda_floats(n, 1, managed=True) as (array,):
        array.host.fill_(1.0)  # the CPU writes
        array.device.add_(2.0)  # the GPU adds
        torch.cuda.synchronize()
        assert torch.equal(array.host, torch.full((n,), 3.0))  # the CPU reads the GPU's sum


def test_pinned_host_memory_copies_faster_than_pageable(hpml, device):
    nbytes = 256 * 2**20
    pageable = torch.randint(0, 256, (nbytes,), dtype=torch.uint8)
    pinned = pageable.pin_memory()
    assert pinned.is_pinned() and not pageable.is_pinned()
    target = torch.empty(nbytes, dtype=torch.uint8, device=device)
    rates = {}
    for memory, source in (("pageable", pageable), ("pinned", pinned)):
        with hpml.row(memory=memory) as row:
            timing = row.time(target.copy_, source, non_blocking=memory == "pinned")
            rates[memory] = row.record_bandwidth("h2d_bandwidth", nbytes, timing).value
        torch.cuda.synchronize()
        assert torch.equal(target.cpu(), pageable)
    assert rates["pinned"] > rates["pageable"], rates


@pytest.mark.parametrize("launch", ["a", "b", "c"])
@pytest.mark.parametrize("memory", ["explicit", "unified"])
def test_the_handouts_cuda_program_adds_on_the_gpu(hpml, device, memory, launch):
    from suites.vector_add.cuda_program import NvccNotFound, cuda_program

    n = 1_000_003  # not a multiple of the block: the last block's guard is used
    x, y = torch.rand(n), torch.rand(n)
    out = torch.full((n,), float("nan"))
    try:
        timing = hpml.time(cuda_program, x, y, out, memory, launch, clock="host")
    except NvccNotFound as exc:
        pytest.skip(str(exc))
    assert torch.equal(out, x + y)  # every element written, bit for bit
    assert timing.median > 0
