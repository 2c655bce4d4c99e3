"""The SM-clock throttle check of the CUDA clock, with fake events and a fake NVML: the clock
read while a batch runs, judged against 75 % of the GPU's default clock, throttled batches
measured again only while the time cap allows, and an NVML that cannot be read turning the
check off with one warning."""

from __future__ import annotations

import itertools

import pytest
from hpml_testing import FakeGpu

from pytest_hpml.measure.clocks import CudaClock
from pytest_hpml.measure.timing import TimingConfig, measure

DEFAULT_MHZ = 1755.0  # an H100 SXM's default applications clock (its maximum: 1980 MHz)


def test_batches_measured_while_the_sm_clock_was_throttled_are_measured_again() -> None:
    gpu = FakeGpu()
    clocks = iter([1700.0, 1200.0, 1700.0, 1700.0])  # the second batch ran throttled
    clock = CudaClock(gpu.event, gpu.synchronize, sm_clock=lambda: (next(clocks), DEFAULT_MHZ))
    calls = itertools.count()

    def kernel() -> None:
        # 1 ms normally; 3 ms while throttled (the batch that reads 1200 MHz).
        gpu.kernel("fn", 3.0 if 2 <= next(calls) < 4 else 1.0)

    first = clock.run(kernel, count=2, inner=1, time_left=1.0)
    second = clock.run(kernel, count=2, inner=1, time_left=1.0)
    assert first == [pytest.approx(1e-3)] * 2 and second == [pytest.approx(1e-3)] * 2
    assert clock.throttled == 2 and clock.kept_throttled == 0
    assert "2 sample(s) taken while the SM clock was below 75% of its default clock" in \
        clock.warnings()[0]


def test_a_sustained_tensor_core_clock_is_not_throttled() -> None:
    # Long GEMMs hold an H100 SXM at 1.6-1.8 GHz, or lower under a power cap; 75 % of the
    # default clock (nvbench's threshold) is 1316 MHz. 90 % of the maximum flagged them all.
    gpu = FakeGpu()
    readings = iter([1400.0, 1300.0])
    clock = CudaClock(gpu.event, gpu.synchronize, sm_clock=lambda: (next(readings), DEFAULT_MHZ))
    clock.run(lambda: gpu.kernel("fn", 1.0), count=1, inner=1, time_left=1.0)
    assert clock.throttled == 0
    clock.run(lambda: gpu.kernel("fn", 1.0), count=1, inner=1, time_left=0.0)
    assert clock.throttled == 1  # 1300 MHz is below 75 %: throttled


def test_the_sm_clock_is_read_while_the_batch_runs() -> None:
    gpu = FakeGpu()

    def read() -> tuple[float, float]:
        gpu.log.append("sm_clock")
        return DEFAULT_MHZ, DEFAULT_MHZ

    CudaClock(gpu.event, gpu.synchronize, sm_clock=read).run(
        lambda: gpu.kernel("fn", 1.0), count=2, inner=1, time_left=1.0)
    # Before the synchronize: after it, the GPU is going idle and its clock drops.
    assert gpu.log == ["record", "fn", "record"] * 2 + ["sm_clock", "sync"]


def test_a_clock_throttled_throughout_stops_at_the_time_cap_and_says_so() -> None:
    gpu = FakeGpu()
    clock = CudaClock(gpu.event, gpu.synchronize, sm_clock=lambda: (1000.0, DEFAULT_MHZ),
                      now=lambda: gpu.now_ms / 1e3)
    batches = itertools.count()

    def kernel() -> None:
        next(batches)
        gpu.kernel("fn", 2.0)

    out = clock.run(kernel, count=10, inner=1, time_left=0.05)
    assert len(out) == 10 and clock.kept_throttled == 10
    # Each batch of 10 takes 20 ms: measured again while 50 ms were left, then kept.
    assert next(batches) == 3 * 10
    assert "kept: the time cap ran out first" in clock.warnings()[-1]
    # Without time left (a warm-up), nothing is measured again.
    assert len(clock.run(kernel, count=4, inner=1)) == 4 and next(batches) == 30 + 4 + 1


def test_measure_gives_the_clock_the_time_left_under_the_cap() -> None:
    gpu = FakeGpu()
    seen: list[float | None] = []

    class Recording(CudaClock):
        def run(self, fn, count, inner, *, time_left=None, warmup=False):
            seen.append(time_left)
            return super().run(fn, count, inner, time_left=time_left, warmup=warmup)

    clock = Recording(gpu.event, gpu.synchronize, sm_clock=lambda: (1000.0, DEFAULT_MHZ),
                      now=lambda: gpu.now_ms / 1e3)
    timing = measure(lambda: gpu.kernel("fn", 1.0), clock=clock,
                     wall_ns=lambda: int(gpu.now_ms * 1e6),
                     config=TimingConfig(min_samples=10, max_time=0.1))
    assert seen[0] == 0.0  # the warm-up is never measured again
    assert all(0 < left <= 0.1 for left in seen[1:])
    # Throttled throughout: the time spent stays near the cap, not 3 x the batches.
    assert gpu.now_ms <= 1e3 * 0.1 + 20
    assert any("kept" in w for w in timing.warnings)


class FailingNvml:
    """nvidia-ml-py on a vGPU or in a container without NVML access: clock queries fail."""

    NVML_CLOCK_SM = 1

    def nvmlDeviceGetDefaultApplicationsClock(self, handle, kind):
        return 1755

    def nvmlDeviceGetClockInfo(self, handle, kind):
        raise RuntimeError("NVML_ERROR_NO_PERMISSION")


def test_an_nvml_error_turns_the_throttle_check_off_with_one_warning() -> None:
    from pytest_hpml.machine.nvml import SmClock

    reader = SmClock(FailingNvml(), handle="gpu0")
    gpu = FakeGpu()
    first = CudaClock(gpu.event, gpu.synchronize, sm_clock=reader)
    timing = measure(lambda: gpu.kernel("fn", 1.0), clock=first,
                     wall_ns=lambda: int(gpu.now_ms * 1e6),
                     config=TimingConfig(min_samples=5, max_time=0.05))
    assert timing.n >= 5 and first.throttled == 0
    assert [w for w in timing.warnings if "throttling not checked" in w] == [
        "throttling not checked: NVML could not read the SM clock (RuntimeError: "
        "NVML_ERROR_NO_PERMISSION)"]
    second = CudaClock(gpu.event, gpu.synchronize, sm_clock=reader)
    second.run(lambda: gpu.kernel("fn", 1.0), count=3, inner=1, time_left=1.0)
    assert second.warnings() == []  # said once per GPU, not in every timing


# -- as a user meets it: hpml.time on a CUDA test, the GPU a fake --------------------------------

FAKE_GPU_CONFTEST = '''
import pytest
from hpml_testing import FakeGpu

from pytest_hpml.measure import clocks

GPU = FakeGpu()
DEFAULT_MHZ = 1755.0


@pytest.fixture(autouse=True)
def fake_cuda_clock(monkeypatch):
    # Each test starts on an idle GPU: at its idle clock until it has run more than the
    # warm-up's one call, at its default clock from then on.
    before = GPU.log.count("fn")

    def sm_clock():
        return (345.0 if GPU.log.count("fn") - before <= 1 else DEFAULT_MHZ), DEFAULT_MHZ

    def cuda_clock(device, cold_l2):
        return clocks.CudaClock(GPU.event, GPU.synchronize, device=str(device),
                                sm_clock=sm_clock, now=lambda: GPU.now_ms / 1e3)

    monkeypatch.setattr(clocks, "_cuda_clock", cuda_clock)
'''

FAKE_GPU_TEST = '''
import pytest
from conftest import GPU


@pytest.mark.parametrize("device", ["cuda"])
def test_kernel(hpml, device):
    timing = hpml.time(lambda: GPU.kernel("fn", 1.0))
    assert timing.n >= 10 and timing.samples == [pytest.approx(1e-3)] * timing.n


@pytest.mark.parametrize("device", ["cuda"])
def test_pedantic(benchmark, device):
    benchmark.pedantic(GPU.kernel, args=("fn", 1.0), rounds=5, warmup_rounds=1)
    assert benchmark.stats.stats.median == pytest.approx(1e-3)
'''


def test_an_idle_clock_read_during_the_warm_up_is_no_throttled_sample(
        pytester: pytest.Pytester) -> None:
    from hpml_testing import run_with_json

    pytester.makeconftest(FAKE_GPU_CONFTEST)
    pytester.makepyfile(test_user=FAKE_GPU_TEST)
    result, document = run_with_json(pytester, "-p", "no:benchmark")
    result.assert_outcomes(passed=2)
    assert len(document["records"]) == 2
    for record in document["records"]:
        # Every sample was taken at the default clock: nothing was throttled, kept or measured
        # again (hpml.time's warm-up call, benchmark.pedantic's warmup_rounds).
        assert not [w for w in record["warnings"] if "SM clock" in w], record["warnings"]
