"""The GPU busy-wait ahead of each batch of CUDA-event samples, on a fake GPU that runs against
the host's clock (hpml_testing.HostBoundGpu): the spin rate calibrated under load, each batch's
busy-wait timed with events and the rate raised when one falls short, batches the host was
still queueing when their busy-wait ended measured again, and the whole of it as a user meets
it: hpml.time on a CUDA test, torch.cuda's event and spin API faked."""

from __future__ import annotations

import pytest
from hpml_testing import FakeGpu, HostBoundGpu, run_with_json

from pytest_hpml.measure.busy_wait import BusyWait, calibrate_cycles_per_second
from pytest_hpml.measure.clocks import CudaClock

IDLE, LOADED = 400.0, 1600.0  # MHz: a resting GPU's SM clock, and under load


def test_the_spin_rate_is_calibrated_under_load_not_at_the_idle_clock() -> None:
    # The GPU starts at rest: the first 20 ms of spinning run at 400 MHz. One spin timed on a
    # resting GPU measured 0.4 G cycles/s, and every later busy-wait lasted a quarter of what
    # it was asked for; spins back to back until two agree give the loaded clock's rate.
    gpu = HostBoundGpu(idle_mhz=IDLE, loaded_mhz=LOADED)
    rate = calibrate_cycles_per_second(gpu.event, gpu.synchronize, gpu.spin)
    assert rate == pytest.approx(LOADED * 1e6)
    assert gpu.spans[1] == pytest.approx(10_000_000 / IDLE / 1e3)  # the first timed spin: idle
    assert gpu.log.count("sync") == 1  # settled within the first round


def test_a_clock_that_never_settles_gives_its_fastest_rate_after_the_last_round() -> None:
    gpu = HostBoundGpu()
    mhz = iter(range(500, 100_000, 100))  # rises with every spin, untimed ones included
    gpu.mhz = lambda at_ms: next(mhz)  # type: ignore[method-assign]
    rate = calibrate_cycles_per_second(gpu.event, gpu.synchronize, gpu.spin, spins=3,
                                       max_rounds=2)
    assert gpu.log.count("sync") == 2
    # Round 1: 500 (untimed), 600, 700, 800 MHz; round 2: 900 (untimed), 1000, 1100, 1200.
    assert rate == pytest.approx(1200e6, rel=1e-3)


def test_a_constant_rate_is_measured_and_a_spin_that_takes_no_time_is_refused() -> None:
    gpu = FakeGpu()
    rate = 1.7e9

    def spin(cycles: int) -> None:
        gpu.kernel("spin", cycles / rate * 1e3)

    assert calibrate_cycles_per_second(gpu.event, gpu.synchronize, spin) == pytest.approx(rate)
    # The untimed spin first, so the first timed one starts on a busy GPU.
    assert gpu.log[:3] == ["spin", "record", "spin"]
    with pytest.raises(RuntimeError, match="no measurable time"):
        calibrate_cycles_per_second(gpu.event, gpu.synchronize, lambda cycles: None)


def test_a_busy_wait_that_fell_short_sets_the_rate_and_one_that_did_not_leaves_it() -> None:
    spun: list[int] = []
    wait = BusyWait(spun.append, cycles_per_second=1e9)
    wait(0.002)
    assert spun == [2_000_000]
    assert not wait.observe(0.002, 0.0025) and wait.cycles_per_second == 1e9  # slower: kept
    assert wait.observe(0.002, 0.001)  # ran twice as fast: the clock rose
    assert wait.cycles_per_second == pytest.approx(2e9) and wait.recalibrations == 1
    wait(0.002)
    assert spun[-1] == 4_000_000
    with pytest.raises(ValueError, match="cycles_per_second must be > 0"):
        BusyWait(spun.append, 0.0)


def _launch(gpu: HostBoundGpu, host_ms: float = 0.1, gpu_ms: float = 0.02):
    """A short kernel behind a slower launch path: 0.1 ms of host, 0.02 ms of GPU."""
    def call() -> None:
        gpu.host(host_ms)
        gpu.kernel("fn", gpu_ms)
    return call


def test_a_batch_queued_past_its_busy_wait_is_measured_again_with_the_rate_it_measured() -> None:
    # Calibrated at 400 MHz, run at 1600: each busy-wait lasts a quarter of what it was asked,
    # the GPU catches up with the host and the last samples of the batch time the launch path.
    gpu = HostBoundGpu(idle_mhz=LOADED, loaded_mhz=LOADED, ramp_ms=0.0)
    wait = BusyWait(gpu.spin, cycles_per_second=IDLE * 1e6)
    clock = CudaClock(gpu.event, gpu.synchronize, busy_wait=wait, now=gpu.now)
    clock._host_per_sample = 0.13e-3  # learned from a warm-up, as measure's would be
    samples = clock.run(_launch(gpu), count=10, inner=1, time_left=1.0)
    assert samples == [pytest.approx(0.02e-3)] * 10
    # The events around the spin also hold one launch gap: within a percent.
    assert wait.cycles_per_second == pytest.approx(LOADED * 1e6, rel=0.01)
    assert (clock.uncovered, clock.kept_uncovered) == (10, 0)
    assert clock.warnings() == [
        "10 sample(s) queued after the GPU busy-wait ahead of their batch had ended (they may "
        "time the host's launches, not the GPU's work) were measured again"]


def test_without_time_left_a_batch_queued_past_its_busy_wait_is_kept_and_said() -> None:
    gpu = HostBoundGpu(idle_mhz=LOADED, loaded_mhz=LOADED, ramp_ms=0.0)
    clock = CudaClock(gpu.event, gpu.synchronize, now=gpu.now,
                      busy_wait=BusyWait(gpu.spin, cycles_per_second=IDLE * 1e6))
    clock._host_per_sample = 0.13e-3
    samples = clock.run(_launch(gpu), count=10, inner=1, time_left=0.0)
    assert max(samples) > 0.1e-3  # the launch path, timed
    assert clock.kept_uncovered == 10 and "were kept: the time cap ran out" in \
        clock.warnings()[-1]
    # The warm-up's batch is never judged (its host time is not known yet), but it still
    # sets the rate.
    again = CudaClock(gpu.event, gpu.synchronize, now=gpu.now,
                      busy_wait=BusyWait(gpu.spin, cycles_per_second=IDLE * 1e6))
    again.run(_launch(gpu), count=1, inner=1, warmup=True)
    assert again.warnings() == [] and again._busy_wait.recalibrations == 1


def test_a_sample_longer_to_queue_than_the_longest_busy_wait_is_kept_at_once() -> None:
    # 60 ms of host work per call: no busy-wait within the cap (50 ms) covers it, so
    # measuring it again would only spend the time cap.
    gpu = HostBoundGpu(idle_mhz=LOADED, loaded_mhz=LOADED, ramp_ms=0.0)
    clock = CudaClock(gpu.event, gpu.synchronize, now=gpu.now,
                      busy_wait=BusyWait(gpu.spin, cycles_per_second=LOADED * 1e6))
    clock._host_per_sample = 60e-3
    clock.run(_launch(gpu, host_ms=60.0), count=3, inner=1, time_left=10.0)
    assert gpu.log.count("sync") == 3  # one sample per part, none measured again
    assert clock.host_bound == 3 and clock.uncovered == 0
    assert "longer to queue them than the longest busy-wait (0.05 s)" in clock.warnings()[0]


def test_a_batch_that_fills_the_launch_queue_is_covered_by_the_gpu_it_waited_for() -> None:
    # A cold-L2 timing on an H200: each sample queues an L2 flush (tens of microseconds of GPU
    # work) before a kernel of a few. The stream's queue fills, the host blocks in its
    # launches until the GPU frees a slot, and queueing the batch outlasts any busy-wait; yet
    # the GPU never waited for the host: every sample found the GPU busy when it was queued.
    # (Before, all 640 samples of such timings were called uncovered and measured again.)
    gpu = HostBoundGpu(idle_mhz=LOADED, loaded_mhz=LOADED, ramp_ms=0.0, queue_depth=16)
    clock = CudaClock(gpu.event, gpu.synchronize, now=gpu.now,
                      flush_l2=lambda: gpu.kernel("flush", 0.05),
                      busy_wait=BusyWait(gpu.spin, cycles_per_second=LOADED * 1e6))
    clock._host_per_sample = 0.03e-3
    samples = clock.run(_launch(gpu, host_ms=0.001, gpu_ms=0.002), count=50, inner=1,
                        time_left=1.0)
    assert samples == [pytest.approx(0.002e-3)] * 50
    assert (clock.uncovered, clock.host_bound, clock.warnings()) == (0, 0, [])
    assert gpu.log.count("sync") == 1  # measured once


def test_a_sample_queued_to_an_idle_gpu_is_uncovered_even_when_the_queue_was_full() -> None:
    # The queue fills behind the busy-wait, then the GPU drains it faster than the slow launch
    # path refills it: the last samples reach an idle GPU and time the host.
    gpu = HostBoundGpu(idle_mhz=LOADED, loaded_mhz=LOADED, ramp_ms=0.0, queue_depth=8)
    clock = CudaClock(gpu.event, gpu.synchronize, now=gpu.now,
                      busy_wait=BusyWait(gpu.spin, cycles_per_second=LOADED * 1e6))
    clock._host_per_sample = 0.005e-3
    samples = clock.run(_launch(gpu, host_ms=0.1, gpu_ms=0.02), count=20, inner=1,
                        time_left=0.0)
    assert clock.kept_uncovered == 20 and max(samples) > 0.1e-3


# -- as a user meets it --------------------------------------------------------------------------

FAKE_CUDA_CONFTEST = '''
import contextlib

import pytest
import torch
from hpml_testing import HostBoundGpu

import pytest_hpml
from pytest_hpml.measure import clocks

GPU = HostBoundGpu(idle_mhz=400.0, loaded_mhz=800.0)


@pytest.fixture(autouse=True)
def fake_cuda(monkeypatch):
    # torch.cuda's event, synchronize and spin, on a GPU that settles at 800 MHz under load...
    monkeypatch.setattr(torch.cuda, "Event", lambda enable_timing=False: GPU.event())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: GPU.synchronize())
    monkeypatch.setattr(torch.cuda, "_sleep", GPU.spin)
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    pytest_hpml.gpu_busy_wait.cache_clear()
    busy_wait = pytest_hpml.gpu_busy_wait("cuda")
    GPU.loaded_mhz = 1800.0  # ... and boosts once the timing begins

    def cuda_clock(device, cold_l2):
        return clocks.CudaClock(torch.cuda.Event, torch.cuda.synchronize, device=str(device),
                                busy_wait=busy_wait, now=GPU.now)

    monkeypatch.setattr(clocks, "_cuda_clock", cuda_clock)
'''

FAKE_CUDA_TEST = '''
import pytest
from conftest import GPU


def launch():
    GPU.host(0.1)  # ms of Python and framework before the kernel is queued
    GPU.kernel("fn", 0.02)


@pytest.mark.parametrize("device", ["cuda"])
def test_short_kernel(hpml, device):
    timing = hpml.time(launch)
    # Every sample times the kernel, none the host's launch path.
    assert timing.samples == [pytest.approx(0.02e-3)] * timing.n
'''


def test_busy_waits_cover_their_batches_at_the_clock_the_gpu_runs(
        pytester: pytest.Pytester) -> None:
    pytester.makeconftest(FAKE_CUDA_CONFTEST)
    pytester.makepyfile(test_user=FAKE_CUDA_TEST)
    result, document = run_with_json(pytester)
    result.assert_outcomes(passed=1)
    (record,) = document["records"]
    assert not [w for w in record["warnings"] if "busy-wait" in w], record["warnings"]
