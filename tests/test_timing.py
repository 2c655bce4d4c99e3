"""The timers: warm-up, adaptive sampling and the CUDA event logic, driven by fake clocks."""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from hpml_testing import FakeGpu
from torch import device as torch_device

from pytest_hpml.measure.clocks import Call, CpuClock, CudaClock, clock_for
from pytest_hpml.measure.stats import NOISY_IQR_RATIO, summarize
from pytest_hpml.measure.timing import MIN_SAMPLES_FLOOR, Timing, TimingConfig, measure


class FakeClock:
    """A CPU-like clock whose calls take scripted durations; wall time advances with them."""

    device = "cpu"

    def __init__(self, durations: Iterable[float]) -> None:
        self._durations = iter(durations)
        self.now_ns = 0
        self.runs: list[tuple[int, int]] = []  # (count, inner) of each batch

    def wall_ns(self) -> int:
        return self.now_ns

    def run(self, fn: Callable[[], Any], count: int, inner: int, **_: Any) -> list[float]:
        self.runs.append((count, inner))
        out = []
        for _ in range(count):
            total = 0.0
            for _ in range(inner):
                fn()
                total += next(self._durations)
            self.now_ns += int(total * 1e9)
            out.append(total / inner)
        return out


def test_first_call_is_never_a_sample() -> None:
    calls = []
    # The first call is the slow one (JIT, autotuning): 1 s against 1 ms afterwards.
    clock = FakeClock(itertools.chain([1.0], itertools.repeat(1e-3)))
    timing = measure(lambda: calls.append(1), clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10))
    assert clock.runs[0] == (1, 1)  # the warm-up batch: one call, timed separately
    assert 1.0 not in timing.samples
    assert timing.samples == [1e-3] * timing.n
    assert len(calls) == 1 + timing.n


def test_more_warmup_calls_are_excluded_too() -> None:
    clock = FakeClock(itertools.chain([5.0, 2.0, 1.0], itertools.repeat(1e-3)))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, warmup=3))
    assert max(timing.samples) == 1e-3


def test_warmup_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="first call is never a sample"):
        TimingConfig(warmup=0)


@pytest.mark.parametrize("field, value", [("min_samples", 0), ("max_time", 0),
                                          ("target_rse", 0)])
def test_bad_config_is_refused(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        TimingConfig(**{field: value})


def test_steady_calls_stop_after_min_samples() -> None:
    clock = FakeClock(itertools.repeat(1e-3))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=15, max_time=100.0))
    assert timing.n == 15  # zero spread: the first batch is already tight enough


def test_the_time_cap_lowers_the_sample_count_down_to_the_floor_and_says_so() -> None:
    # Every call takes longer than the whole cap (time.sleep(5) in a 0.5 s quick cap): not
    # min_samples x 5 s, but the floor of MIN_SAMPLES_FLOOR samples, with a warning.
    clock = FakeClock(itertools.repeat(5.0))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=0.5))
    assert timing.n == MIN_SAMPLES_FLOOR
    assert clock.now_ns / 1e9 == pytest.approx(5.0 * (1 + MIN_SAMPLES_FLOOR))
    assert any(f"{MIN_SAMPLES_FLOOR} samples instead of min_samples=10" in w and "--hpml-max-time"
               in w for w in timing.warnings)


def test_a_call_that_fits_a_few_times_in_the_cap_takes_as_many_as_fit() -> None:
    clock = FakeClock(itertools.repeat(0.1))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=0.5))
    assert timing.n == 5 and "5 samples instead of min_samples=10" in timing.warnings[0]


def test_a_slow_first_call_does_not_cut_the_sample_count() -> None:
    # Compilation in the warm-up call: later calls are fast, and min_samples are all taken.
    clock = FakeClock(itertools.chain([30.0], itertools.repeat(1e-3)))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=0.5))
    assert timing.n >= 10 and not any("instead of" in w for w in timing.warnings)


def test_sampling_continues_until_the_standard_error_is_small() -> None:
    # +-1 % alternating: stdev/sqrt(n)/mean <= 0.1 % needs about 100 samples.
    clock = FakeClock(itertools.cycle([0.99e-3, 1.01e-3]))
    target = 0.001
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=100.0, target_rse=target))
    assert summarize(timing.samples).relative_standard_error <= target
    assert 100 <= timing.n <= 220  # batches grow, so it may overshoot, but not by much
    assert summarize(timing.samples[: timing.n // 2]).relative_standard_error > target


def test_noisy_calls_stop_at_the_time_cap() -> None:
    clock = FakeClock(itertools.cycle([1e-3, 2e-3]))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=0.2))
    elapsed = sum(timing.samples)  # wall time spent sampling, in this fake
    assert 0.2 <= elapsed <= 0.2 * 1.1
    assert timing.n < 400


def _fixed(samples: list[float]) -> Timing:
    """measure() over exactly these samples: the wall clock jumps past the cap at once."""
    clock = FakeClock(itertools.chain([min(samples)], samples))
    wall = itertools.chain([0], itertools.repeat(10**12))
    return measure(lambda: None, clock=clock, wall_ns=lambda: next(wall),
                   config=TimingConfig(min_samples=len(samples), max_time=100.0))


def test_iqr_of_ten_percent_of_the_median_is_noisy() -> None:
    noisy = _fixed([9.5, 9.5, 10.0, 10.5, 10.5])  # IQR 1.0, median 10.0: exactly 10 %
    assert noisy.iqr / noisy.median == NOISY_IQR_RATIO
    assert len(noisy.warnings) == 1
    assert "noisy timing" in noisy.warnings[0] and "10%" in noisy.warnings[0]
    quiet = _fixed([9.6, 9.6, 10.0, 10.4, 10.4])  # IQR 8 % of the median
    assert quiet.warnings == []


def test_timing_fields() -> None:
    t = Timing(samples=[3.0, 1.0, 2.0, 4.0, 5.0])
    assert (t.n, t.median, t.min, t.mean) == (5, 3.0, 1.0, 3.0)
    assert t.iqr == pytest.approx(2.0)
    assert t.cv == pytest.approx(summarize(t.samples).stdev / 3.0)
    assert "median=3000 ms" in repr(t)


class TickingNow:
    """A fake perf_counter_ns: each reading costs `read_ns`, each timed call `call_ns`."""

    def __init__(self, read_ns: int, call_ns: int) -> None:
        self.ns, self.read_ns, self.call_ns = 0, read_ns, call_ns

    def __call__(self) -> int:
        self.ns += self.read_ns
        return self.ns

    def call(self, *args: Any, **kwargs: Any) -> tuple:
        self.ns += self.call_ns
        return args, kwargs


def test_cpu_clock_repeats_very_short_calls_inside_a_sample_and_takes_out_its_reads() -> None:
    now = TickingNow(read_ns=80, call_ns=1000)
    clock = CpuClock(now_ns=now)
    out = clock.run(now.call, count=3, inner=4)
    # 4 calls of 1 us between two readings of the clock: per call, with the 80 ns that one
    # reading costs (measured by the clock itself) taken out.
    assert clock.overhead_ns == 80
    assert out == [pytest.approx(1e-6)] * 3
    # Left in, the reading would add 80 ns / 4 calls to every call.
    left_in = CpuClock(now_ns=now, overhead_ns=0).run(now.call, count=1, inner=4)
    assert left_in == [pytest.approx(1e-6 + 80e-9 / 4)]


def test_the_compiled_call_passes_arguments_and_keeps_the_last_result() -> None:
    seen = []

    def fn(a: int, b: int, *, out: list, **rest: Any) -> int:
        seen.append((a, b, rest))
        out.append(a + b)
        return len(out)

    sink: list[int] = []
    for kwargs in ({"out": sink}, {"out": sink, "not-an-identifier": 1}):
        seen.clear()
        call = Call(fn, (1, 2), kwargs)
        loop, arguments = call.loop()
        before = len(sink)
        assert loop(5, *arguments) == before + 5  # the fifth call's result
        assert len(seen) == 5 and seen[0][:2] == (1, 2)
    assert seen[0][2] == {"not-an-identifier": 1}  # a name source cannot hold still passes
    clock = CpuClock(overhead_ns=0)
    clock.run(Call(fn, (3, 4), {"out": sink}), count=2, inner=3)
    assert sink[-6:] == [7] * 6


def test_each_result_is_freed_before_the_next_call_allocates() -> None:
    """A call that allocates its output gets back the block the last one freed, as in timeit's
    loop: the sampling loop held the previous output while the next call allocated, and a
    1M-element torch add's 4 MB outputs took three blocks by turns and read 20-60 % above
    timeit in the same process."""
    class Output:
        pass

    last: list[weakref.ref[Output]] = []
    alive_at_call: list[bool] = []

    def allocate() -> Output:
        alive_at_call.append(bool(last) and last[-1]() is not None)
        out = Output()
        last.append(weakref.ref(out))
        return out

    clock = CpuClock(overhead_ns=0)
    clock.run(allocate, count=5, inner=1)
    assert alive_at_call == [False] * 5
    clock.run(allocate, count=3, inner=2)  # inside a sample the loop drops each at once
    assert alive_at_call == [False] * 11


def test_cpu_calls_below_the_clock_resolution_are_batched() -> None:
    clock = FakeClock(itertools.repeat(1e-7))  # 100 ns per call
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=100.0))
    assert timing.inner >= 200  # >= 20 us per sample
    # After the warm-up, rounds of growing calls per sample choose it; then every batch uses it.
    sizes = [inner for _, inner in clock.runs[1:]]
    assert sizes == sorted(sizes) and sizes[-1] == timing.inner
    assert timing.median == pytest.approx(1e-7)


def test_calls_per_sample_are_chosen_from_the_steady_state_not_the_first_call() -> None:
    # The first call of an op is slow (lazy initialization: 5 ms), the next ones take 1 us: the
    # calls per sample come from timed samples after it. Chosen from the warm-up, as before,
    # a 1 us call got one call per sample and the harness's cost in every sample.
    clock = FakeClock(itertools.chain([5e-3], itertools.repeat(1e-6)))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=100.0,
                                         min_sample_time=20e-6))
    assert timing.inner * 1e-6 >= 20e-6
    assert timing.inner <= 2 * 1.25 * 20  # not far beyond what 20 us needs
    assert timing.median == pytest.approx(1e-6)


def test_a_long_call_is_not_called_again_to_choose_its_calls_per_sample() -> None:
    # A 1 s call: one sample of one call shows it is long enough, and that sample is kept.
    clock = FakeClock(itertools.repeat(1.0))
    calls = []
    timing = measure(lambda: calls.append(1), clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=3, max_time=100.0))
    assert timing.inner == 1 and len(calls) == 1 + timing.n


# -- CUDA: events around each sample, one synchronize per batch, L2 flush outside ------------


def test_cuda_clock_events_around_each_sample_and_one_synchronize() -> None:
    gpu = FakeGpu()
    clock = CudaClock(gpu.event, gpu.synchronize)
    out = clock.run(lambda: gpu.kernel("fn", 2.0), count=4, inner=1)
    assert out == [pytest.approx(2e-3)] * 4
    assert gpu.synchronize_calls == 1
    assert gpu.log == ["record", "fn", "record"] * 4 + ["sync"]


def test_cuda_clock_divides_by_inner_calls() -> None:
    gpu = FakeGpu()
    out = CudaClock(gpu.event, gpu.synchronize).run(lambda: gpu.kernel("fn", 1.0), 2, 3)
    assert out == [pytest.approx(1e-3)] * 2
    assert gpu.log == (["record"] + ["fn"] * 3 + ["record"]) * 2 + ["sync"]


def test_cold_l2_flushes_before_each_sample_outside_the_timed_region() -> None:
    gpu = FakeGpu()
    clock = CudaClock(gpu.event, gpu.synchronize, flush_l2=lambda: gpu.kernel("flush", 7.0))
    out = clock.run(lambda: gpu.kernel("fn", 1.0), count=3, inner=1)
    assert out == [pytest.approx(1e-3)] * 3  # the 7 ms flush is in no sample
    assert gpu.log == ["flush", "record", "fn", "record"] * 3 + ["sync"]


def test_busy_wait_is_queued_ahead_of_each_batch_and_sized_from_the_host_time() -> None:
    gpu = FakeGpu()
    waits: list[float] = []
    host = itertools.count(0.0, 1e-4)  # the host spends 0.1 ms between clock readings

    def busy_wait(seconds: float) -> None:
        waits.append(seconds)
        gpu.kernel("busy", seconds * 1e3)

    clock = CudaClock(gpu.event, gpu.synchronize, busy_wait=busy_wait, now=lambda: next(host))
    assert clock.run(lambda: gpu.kernel("fn", 2.0), count=4, inner=1) == [
        pytest.approx(2e-3)] * 4  # the busy-wait precedes the first event: in no sample
    # Events around the busy-wait time it on the GPU (test_busy_wait.py).
    assert gpu.log == ["record", "busy", "record"] + ["record", "fn", "record"] * 4 + ["sync"]
    assert waits[0] == pytest.approx(1.5 * 4 * CudaClock.FIRST_HOST_ESTIMATE)
    clock.run(lambda: gpu.kernel("fn", 2.0), count=4, inner=1)
    # The second batch is sized from the first: 0.1 ms of host time per clock reading, five
    # readings from its start to its end (one as each sample is queued), over 4 samples.
    assert waits[1] == pytest.approx(1.5 * 4 * (5e-4 / 4))
    assert clock.run(lambda: None, count=10_000, inner=1) and waits[2] <= CudaClock.MAX_BUSY_WAIT


def test_a_batch_too_long_to_queue_behind_one_busy_wait_is_split() -> None:
    # A batch-1 forward pass costs the host 4 ms to queue: 100 samples would need 0.6 s of
    # busy-wait, beyond the cap, and later samples would start on an idle GPU. The batch runs
    # as parts that each fit behind their own (capped) busy-wait.
    gpu = FakeGpu()
    waits: list[float] = []
    host = [0.0]

    def busy_wait(seconds: float) -> None:
        waits.append(seconds)
        gpu.kernel("busy", seconds * 1e3)

    def forward() -> None:
        host[0] += 4e-3  # the host's share of one call
        gpu.kernel("fn", 1.0)

    clock = CudaClock(gpu.event, gpu.synchronize, busy_wait=busy_wait, now=lambda: host[0])
    clock.run(forward, count=1, inner=1)  # learns 4 ms per sample
    gpu.log.clear()
    waits.clear()
    out = clock.run(forward, count=100, inner=1)
    assert out == [pytest.approx(1e-3)] * 100
    per_part = int(CudaClock.MAX_BUSY_WAIT / (CudaClock.BUSY_WAIT_MARGIN * 4e-3))  # 8 samples
    assert len(waits) == -(-100 // per_part) == gpu.log.count("sync")
    assert all(w <= CudaClock.MAX_BUSY_WAIT for w in waits)
    # Each part's busy-wait covers its own queueing time, with the margin.
    assert waits[0] >= per_part * 4e-3


def test_host_work_gets_the_wall_clock_and_an_unknown_kind_is_refused() -> None:
    assert isinstance(clock_for("cpu"), CpuClock)
    assert isinstance(clock_for(torch_device("cpu"), "host"), CpuClock)
    # A whole GPU program that ends synchronized is timed on the host, not with events.
    assert isinstance(clock_for(torch_device("cuda"), "host"), CpuClock)
    with pytest.raises(ValueError, match="clock must be 'device'"):
        clock_for("cpu", "wall")


def test_the_timing_keeps_the_last_result() -> None:
    calls = itertools.count()
    clock = FakeClock(itertools.repeat(1e-3))
    timing = measure(lambda k: next(calls) * k, (10,), clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=5, max_time=100.0))
    assert timing.result == 10 * (1 + timing.n * timing.inner - 1)


def test_measure_on_cuda_synchronizes_once_per_batch() -> None:
    gpu = FakeGpu()
    batches = []

    class CountingClock(CudaClock):
        def run(self, fn, count, inner, **kwargs):
            batches.append(count)
            return super().run(fn, count, inner, **kwargs)

    durations = itertools.cycle([1.0, 1.3, 0.8])  # noisy enough to need several batches
    clock = CountingClock(gpu.event, gpu.synchronize, device="cuda:0",
                          flush_l2=lambda: gpu.kernel("flush", 0.1))
    timing = measure(lambda: gpu.kernel("fn", next(durations)), clock=clock,
                     wall_ns=lambda: int(gpu.now_ms * 1e6),
                     config=TimingConfig(min_samples=10, max_time=0.2, cold_l2=True))
    assert timing.device == "cuda:0" and timing.cold_l2
    assert gpu.synchronize_calls == len(batches) >= 3  # warm-up batch + sampling batches
    assert timing.inner == 1  # event timing is never batched into inner repeats
    assert timing.n == sum(batches[1:])
    assert sorted({round(s * 1e4) for s in timing.samples}) == [8, 10, 13]


def test_a_host_clock_in_a_cold_l2_test_flushes_nothing_and_says_so() -> None:
    # @pytest.mark.hpml(cold_l2=True) asks the device clock to flush; the host rows of the same
    # test (a C++ loop, a whole program) keep repeating short calls and are not labelled cold.
    clock = FakeClock(itertools.repeat(1e-7))
    timing = measure(lambda: None, clock=clock, wall_ns=clock.wall_ns,
                     config=TimingConfig(min_samples=10, max_time=100.0, cold_l2=True))
    assert timing.inner >= 200 and timing.cold_l2 is False
