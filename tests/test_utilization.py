"""The background utilization sampler: fixed interval, every source's series, clean stops on
exceptions, the process tree's CPU time, and the metrics it records through the fixture."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
from hpml_testing import metrics_by_test, run_with_json

from pytest_hpml.measure.utilization import (
    ProcessCpuSource,
    Series,
    UtilizationSampler,
    process_tree_cpu_seconds,
)


class ScriptedGpu:
    """Stands in for NVML: each read returns the next scripted snapshot."""

    series = (Series("gpu_util", "%"), Series("sm_clock", "Hz"))

    def __init__(self, snapshots) -> None:
        self._snapshots = iter(snapshots)

    def read(self):
        return next(self._snapshots)


def test_every_interval_samples_every_source_until_stopped() -> None:
    ticks = threading.Semaphore(0)
    taken = []

    def sleep(stop: threading.Event, seconds: float) -> bool:
        # Driven by the test: each release is one interval passing.
        taken.append(seconds)
        while not ticks.acquire(timeout=0.01):
            if stop.is_set():
                return True
        return stop.is_set()

    gpu = ScriptedGpu([(90.0, 1.9e9), (95.0, 1.8e9), (97.0, 1.98e9)])
    sampler = UtilizationSampler([gpu], interval=0.25, sleep=sleep).start()
    for expected in (1, 2, 3):
        ticks.release()
        deadline = time.monotonic() + 5
        while len(sampler.times) < expected and time.monotonic() < deadline:
            time.sleep(0.005)
    sampler.stop()
    assert sampler.values == {"gpu_util": [90.0, 95.0, 97.0], "sm_clock": [1.9e9, 1.8e9, 1.98e9]}
    assert sampler.units == {"gpu_util": "%", "sm_clock": "Hz"}
    assert set(taken) == {0.25}
    assert sampler.mean("gpu_util") == pytest.approx(94.0)


def test_the_sampler_stops_when_the_block_raises() -> None:
    sampler = UtilizationSampler([ScriptedGpu(itertools.repeat((50.0, 1e9)))], interval=0.001)
    with pytest.raises(KeyError, match="training failed"):
        with sampler:
            time.sleep(0.05)
            raise KeyError("training failed")
    assert not any(t.name == "hpml-utilization" for t in threading.enumerate())
    assert sampler.values["gpu_util"] and set(sampler.values["gpu_util"]) == {50.0}


def test_a_failing_source_is_dropped_with_the_reason_and_the_others_go_on() -> None:
    class Broken:
        series = (Series("gpu_util", "%"),)

        def read(self):
            raise RuntimeError("NVML: GPU is lost")

    cpu = ProcessCpuSource(cpu_seconds=itertools.count(0.0, 0.5).__next__,
                           now=itertools.count(0.0, 1.0).__next__, cores=2)
    sampler = UtilizationSampler([Broken(), cpu], interval=0.001)
    with sampler:
        time.sleep(0.05)
    assert sampler.errors == ["Broken: NVML: GPU is lost"]
    assert sampler.values["cpu_util"] and sampler.values["gpu_util"] == []
    # Half a CPU second per wall second on 2 cores: 25 % of the machine.
    assert set(sampler.values["cpu_util"]) == {25.0}


def test_cpu_utilization_counts_live_children(tmp_path: Path) -> None:
    # A fake /proc: the test process (pid 10) with a DataLoader worker (pid 11) of its own.
    def stat(pid: int, utime: int, stime: int, name: str = "python (x)") -> None:
        folder = tmp_path / str(pid)
        folder.mkdir()
        rest = ["S", "1", "1", "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime)]
        (folder / "stat").write_text(f"{pid} ({name}) " + " ".join(rest) + " 0 0 20 0\n")
        (folder / "task" / str(pid)).mkdir(parents=True)
        (folder / "task" / str(pid) / "children").write_text("")

    stat(10, 300, 100)
    stat(11, 150, 50, name="pt_data_worker")
    (tmp_path / "10" / "task" / "10" / "children").write_text("11 ")
    ticks = 100  # SC_CLK_TCK on Linux
    assert process_tree_cpu_seconds(10, tmp_path) == pytest.approx((300 + 100 + 150 + 50) / ticks)


def test_interval_must_be_positive() -> None:
    with pytest.raises(ValueError, match="interval must be > 0"):
        UtilizationSampler([], interval=0)


def test_the_fixture_records_each_series_as_a_metric_with_samples(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import time

        def test_busy(hpml):
            with hpml.sample_utilization(interval=0.02) as sampler:
                # One core busy until the sampler has taken 3 samples: on a loaded machine its
                # thread may get fewer than 0.3 s would give it (2 of 3 runs under xdist).
                end = time.perf_counter() + 30
                while len(sampler.times) < 3 and time.perf_counter() < end:
                    pass
            assert len(sampler.times) >= 3
        """
    )
    result, document = run_with_json(pytester)
    result.assert_outcomes(passed=1)
    metrics = metrics_by_test(document)["test_the_fixture_records_each_series_as_a_metric_with_"
                                        "samples.py::test_busy"]
    cpu = metrics["cpu_util"]
    assert cpu["unit"] == "%" and len(cpu["samples"]) >= 3
    assert 0 < cpu["value"] <= 100
    assert metrics["sample_interval"] == {"name": "sample_interval", "value": 0.02, "unit": "s",
                                          "kind": "setting"}
