"""Helpers shared by the plugin's tests (imported by name: tests/ is on sys.path).

In-process pytester runs are used where possible: a subprocess pays the torch import again.
"""

from __future__ import annotations

import json
import math
import random
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from pytest_hpml.compare import engine
from pytest_hpml.compare.stored import Stored
from pytest_hpml.compare.verdicts import Rules, judge_metric
from pytest_hpml.machine import gpus
from pytest_hpml.results import Metric, Record, Replicates, Verdict

#: Whether CUDA tests run here; most expectations are written for a machine without a GPU.
HAS_GPU = gpus.physical_gpu_count() > 0

#: For the checks of what happens without a GPU (the development machine, CPU-only CI).
without_gpu = pytest.mark.skipif(HAS_GPU, reason="checks the behaviour on a machine without GPU")

#: Inner runs: short timings (the plugin's behaviour is under test, not the machine's), the
#: quick profile whatever the machine, so baseline file names are known, and saves from the
#: run's own process alone (tests of the extra baseline processes ask for them).
FAST = ("--hpml-max-time=0.05", "--hpml-profile=quick", "-p", "no:cacheprovider",
        "--hpml-baseline-processes=1")


def save_in_processes(processes: int) -> tuple[str, ...]:
    """FAST's options for a save that measures every test in `processes` processes (its budget
    lifted): tests of what a history of several processes decides."""
    return (*(a for a in FAST if not a.startswith("--hpml-baseline-processes")),
            "--hpml-save-baseline", f"--hpml-baseline-processes={processes}",
            "--hpml-save-budget=all")


#: A machine that is not this one, for baseline files written by tests.
HERE = {"gpu": None, "gpu_count": 0, "cpu": "Test CPU 9000", "cpu_cores": 4, "torch": "2.9.0"}
ROOT = Path(__file__).resolve().parents[1]


def baseline_file(folder: Path) -> Path:
    """Where a run on this machine saves its quick-profile baseline in `folder`."""
    from pytest_hpml.machine.fingerprint import fingerprint, machine_key

    return Path(folder) / f"{machine_key(fingerprint())}-quick.json"


def strict_json(path: Path) -> Any:
    """Parse as JSON.parse does: NaN and Infinity are not JSON."""
    def reject(token: str) -> None:
        raise ValueError(f"{path}: {token} is not standard JSON")
    return json.loads(Path(path).read_text(encoding="utf-8"), parse_constant=reject)


def run_with_json(pytester: pytest.Pytester, *args: str) -> tuple[Any, dict[str, Any]]:
    """Run pytest in process with a JSON report; returns (result, report document)."""
    out = pytester.path / "hpml-report.json"
    result = pytester.runpytest(*FAST, f"--hpml-report={out}", *args)
    assert out.exists(), result.stdout.str()
    return result, json.loads(out.read_text(encoding="utf-8"))


def metrics_by_test(document: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """{record id: {metric name: metric dict}} from a JSON report."""
    return {r["id"]: {m["name"]: m for m in r["metrics"]} for r in document["records"]}


def only_baseline_file(directory: Path) -> Path:
    files = sorted(directory.glob("*.json"))
    assert len(files) == 1, files
    return files[0]


# -- a GPU stream in miniature, for the CUDA clock's logic ------------------------------------

class FakeGpu:
    """A GPU stream in miniature: a clock that kernels advance and events that read it."""

    def __init__(self) -> None:
        self.now_ms = 0.0
        self.log: list[str] = []
        self.synchronized = False
        self.synchronize_calls = 0

    def event(self) -> FakeEvent:
        return FakeEvent(self)

    def synchronize(self) -> None:
        self.synchronize_calls += 1
        self.synchronized = True
        self.log.append("sync")

    def kernel(self, name: str, ms: float) -> None:
        self.synchronized = False
        self.log.append(name)
        self.now_ms += ms


class FakeEvent:
    def __init__(self, gpu: FakeGpu) -> None:
        self.gpu = gpu
        self.at: float | None = None

    def record(self) -> None:
        self.gpu.log.append("record")
        self.at = self.gpu.now_ms

    def elapsed_time(self, end: FakeEvent) -> float:
        # The real API raises when an event has not completed: the host must synchronize first.
        if not self.gpu.synchronized:
            raise RuntimeError("elapsed_time before synchronize")
        assert self.at is not None and end.at is not None
        return end.at - self.at


def verdicts_of(document: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """{record id: {metric name: its verdict}} from a JSON report (verdicts sit beside the
    metrics)."""
    return {r["id"]: dict(r.get("verdicts") or {}) for r in document["records"]}


# -- a metric as the tests of verdicts write it -------------------------------------------------

@dataclass
class Measured:
    """A metric with what stands beside it: the values of this run's fresh processes (runs,
    relative_runs) when it is the current side, or its stored history when it is the
    evidence. `metric()`, `replicates()` and `stored()` give the plugin's own values."""

    name: str
    value: float
    unit: str = ""
    better: str | None = None
    samples: list[float] | None = None
    tolerance: float | None = None
    exact: bool = False
    derived_from: str | None = None
    yardstick: float | None = None
    runs: list[float] | None = None
    relative_runs: list[float] | None = None
    history: list[float] | None = None
    relative_history: list[float] | None = None
    history_saves: list[int] | None = None
    accepted: list[dict[str, Any]] | None = None
    seeded_from: str | None = None

    def metric(self) -> Metric:
        return Metric(self.name, self.value, self.unit, self.better, samples=self.samples,
                      tolerance=self.tolerance, exact=self.exact,
                      derived_from=self.derived_from, yardstick=self.yardstick)

    def replicates(self) -> Replicates:
        own = self.metric().relative
        relative = None
        if own is not None and (not self.runs or self.relative_runs):
            relative = (own, *(self.relative_runs or []))
        return Replicates((self.value, *(self.runs or [])), relative)

    def stored(self) -> Stored:
        return Stored(self.name, self.value, self.unit, self.better, exact=self.exact,
                      tolerance=self.tolerance, derived_from=self.derived_from,
                      samples=self.samples, yardstick=self.yardstick, history=self.history,
                      relative_history=self.relative_history,
                      history_saves=self.history_saves, accepted=self.accepted,
                      seeded_from=self.seeded_from)


def compare_metric(current: Measured, base: Measured | None, tolerance: float = 0.10,
                   alpha: float = 0.01, can_confirm: int = 0, *, drift: float = 0.05,
                   max_detectable: float | None = None, advice: Any = None) -> Verdict | None:
    """The engine's verdict of one metric (compare/verdicts.judge_metric) for the tests'
    Measured values."""
    return judge_metric(current.metric(), current.replicates(),
                        base.stored() if base is not None else None,
                        Rules(tolerance, alpha, drift, max_detectable), can_confirm, advice)


def judged(*current: Measured, base: dict[str, Measured], tolerance: float = 0.10) -> Record:
    """A row of `current` metrics judged by the engine against `base`."""
    record = Record("r", "e", metrics=[m.metric() for m in current])
    for m in current:
        if m.runs:
            record.replicates[m.name] = m.replicates()
    engine.judge(record, {k: v.stored() for k, v in base.items()}, Rules(tolerance))
    return record
class HostBoundGpu:
    """A GPU stream against the host's clock, for the busy-wait: work starts no earlier than
    the host queues it, so an idle GPU stamps an event the moment the host records it and a
    sample then times the host's launch path; the spin kernel counts SM clock cycles, at
    `idle_mhz` until the GPU has been busy `ramp_ms`, then at `loaded_mhz` (which a test may
    raise: a boost after the busy-wait was calibrated). Times in ms; `now()` is the host's
    clock in seconds, for CudaClock."""

    def __init__(self, idle_mhz: float = 400.0, loaded_mhz: float = 1600.0,
                 ramp_ms: float = 20.0, launch_ms: float = 0.005,
                 queue_depth: int | None = None) -> None:
        self.idle_mhz, self.loaded_mhz, self.ramp_ms = idle_mhz, loaded_mhz, ramp_ms
        self.launch_ms = launch_ms  # what each launch or event record costs the host
        # A real stream holds a bounded number of queued launches: past it the host blocks
        # in the launch until the GPU finishes the oldest (None: unbounded).
        self.queue_depth = queue_depth
        self._pending: list[float] = []  # when each queued launch will be done
        self.host_ms = 0.0
        self.free_ms = 0.0  # when the GPU is done with what was queued
        self.busy_since: float | None = None
        self.synchronized = True
        self.log: list[str] = []
        self.spans: list[float] = []  # ms each spin lasted

    def now(self) -> float:
        return self.host_ms / 1e3

    def host(self, ms: float) -> None:
        """Host work (Python, the framework's launch path) before the next launch."""
        self.host_ms += ms

    def mhz(self, at_ms: float) -> float:
        ramped = self.busy_since is not None and at_ms - self.busy_since >= self.ramp_ms
        return self.loaded_mhz if ramped else self.idle_mhz

    def _wait_for_a_slot(self) -> None:
        self._pending = [done for done in self._pending if done > self.host_ms]
        if self.queue_depth is not None and len(self._pending) >= self.queue_depth:
            self.host_ms = self._pending[len(self._pending) - self.queue_depth]
            self._pending = [done for done in self._pending if done > self.host_ms]

    def _queue(self, name: str, duration: Callable[[float], float]) -> float:
        self._wait_for_a_slot()
        self.host_ms += self.launch_ms
        start = max(self.free_ms, self.host_ms)
        if self.busy_since is None:
            self.busy_since = start
        length = duration(start)
        self.free_ms = start + length
        self._pending.append(self.free_ms)
        self.synchronized = False
        self.log.append(name)
        return length

    def kernel(self, name: str, ms: float) -> None:
        self._queue(name, lambda start: ms)

    def spin(self, cycles: int) -> None:
        """torch.cuda._sleep: `cycles` SM clock cycles (MHz = cycles per microsecond)."""
        self.spans.append(self._queue("spin", lambda start: cycles / self.mhz(start) / 1e3))

    def event(self) -> HostBoundEvent:
        return HostBoundEvent(self)

    def synchronize(self) -> None:
        self.host_ms = max(self.host_ms, self.free_ms)
        self.synchronized = True
        self.log.append("sync")


class HostBoundEvent:
    def __init__(self, gpu: HostBoundGpu) -> None:
        self.gpu = gpu
        self.at: float | None = None

    def record(self) -> None:
        gpu = self.gpu
        gpu._wait_for_a_slot()
        gpu.host_ms += gpu.launch_ms
        self.at = max(gpu.free_ms, gpu.host_ms)  # stamped when the GPU reaches it
        gpu._pending.append(self.at)
        gpu.log.append("record")

    def elapsed_time(self, end: HostBoundEvent) -> float:
        if not self.gpu.synchronized:
            raise RuntimeError("elapsed_time before synchronize")
        assert self.at is not None and end.at is not None
        return end.at - self.at


# -- NVML in miniature ---------------------------------------------------------------------------

class NvmlNotFound(Exception):
    """NVMLError_NotFound / NVMLError_NotSupported in the fake."""


class NvmlMachine:
    """nvidia-ml-py on a machine of whole GPUs, some split into MIG instances: what discovery,
    the handle lookup, the SM clock and the utilization source ask of it. NVML counts its starts
    (`starts` - `shutdowns` is what a caller left open). A MIG instance has its own memory, no
    clock and (as NVML says of MIG) no utilization of its own.

        NvmlMachine({"GPU-a": ["MIG-a1", "MIG-a2"], "GPU-b": []})  # GPU 0 split in two
    """

    NVML_CLOCK_SM = 1
    NVML_DEVICE_MIG_ENABLE = 1

    def __init__(self, gpus: dict[str, list[str]], name: str = "NVIDIA H100 80GB HBM3",
                 start_fails: bool = False) -> None:
        self.gpus = gpus  # GPU UUID -> the UUIDs of its MIG instances ([]: MIG off)
        self.name = name
        self.start_fails = start_fails
        self.starts = self.shutdowns = 0

    def _gpu_of(self, handle: str) -> str:
        return next(g for g, instances in self.gpus.items() if handle == g or handle in instances)

    def nvmlInit(self) -> None:
        if self.start_fails:
            raise NvmlNotFound("NVML_ERROR_DRIVER_NOT_LOADED")
        self.starts += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return list(self.gpus)[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid in self.gpus or any(uuid in m for m in self.gpus.values()):
            return uuid
        raise NvmlNotFound(f"NVML_ERROR_NOT_FOUND: {uuid}")

    def nvmlDeviceGetUUID(self, handle: str) -> str:
        return handle

    def nvmlDeviceGetName(self, handle: str) -> str:
        return self.name

    def nvmlSystemGetDriverVersion(self) -> str:
        return "575.51.03"

    def nvmlDeviceGetMigMode(self, handle: str) -> tuple[int, int]:
        mode = int(bool(self.gpus[handle]))
        return mode, mode

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: str) -> int:
        return 7 if self.gpus[handle] else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: str, index: int) -> str:
        instances = self.gpus[handle]
        if index >= len(instances):
            raise NvmlNotFound("NVML_ERROR_NOT_FOUND: no MIG device in this slot")
        return instances[index]

    def nvmlDeviceIsMigDeviceHandle(self, handle: str) -> bool:
        return handle not in self.gpus

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: str) -> str:
        return self._gpu_of(handle)

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> Any:
        if handle not in self.gpus:
            raise NvmlNotFound("NVML_ERROR_NOT_SUPPORTED: utilization of a MIG instance")
        return _Rates(gpu=87, memory=41)

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> Any:
        return _Memory(used=(10 if handle in self.gpus else 3) * 2**30)

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: str, kind: int) -> int:
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, handle: str, kind: int) -> int:
        return 1980

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        if handle not in self.gpus:
            raise NvmlNotFound("NVML_ERROR_NOT_SUPPORTED: a MIG instance has no clock of its own")
        return 1650


@dataclass
class _Rates:
    gpu: int
    memory: int


@dataclass
class _Memory:
    used: int


def outside_xdist(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-benchmark disables itself in any process whose environment names an xdist worker,
    as this test's process does under `pytest -n`: its inner runs must not see it."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)


class SweepRow(NamedTuple):
    """A sweep's row's values as a noisy machine measures them (random_sweep_row)."""

    saves: list[int]  # the values each save added to the history
    history: list[float]
    now: list[float]  # this run's processes
    level: float
    spread: float  # within a process, relative


def random_sweep_row(rng: random.Random, moves: tuple[float, ...] = (1.0, 1.0, 1.0, 1.12, 1.3,
                                                                     0.7, 2.0)) -> SweepRow:
    """A history of 1-6 saves of 1-3 processes each and 1-3 processes now, each value at one
    of two speeds of the machine 50 % apart now and then, a preempted call now and then, and
    the row moved by one of `moves` now."""
    level = rng.uniform(1e-6, 1e-3)
    spread = rng.choice([0.002, 0.02, 0.08, 0.2])

    def value(moved: float = 1.0) -> float:
        v = level * moved * math.exp(rng.gauss(0, spread))
        if rng.random() < 0.1:
            v *= 1.5  # the machine's slow speed
        if rng.random() < 0.02:
            v *= rng.uniform(5, 50)  # a preempted call
        return v

    saves = [rng.randint(1, 3) for _ in range(rng.randint(1, 6))]
    history = [value() for _ in range(sum(saves))]
    moved = rng.choice(moves)
    return SweepRow(saves, history, [value(moved) for _ in range(rng.randint(1, 3))], level,
                    spread)


def arrays_from(monkeypatch: pytest.MonkeyPatch, rows: int) -> None:
    """Judge families of `rows` rows or more as arrays (compare/arrays.py), whether numpy is
    imported yet or not; 10**9: row by row."""
    from pytest_hpml.compare import arrays

    monkeypatch.setattr(arrays, "ARRAY_ROWS", rows)
    monkeypatch.setattr(arrays, "ARRAY_ROWS_TO_IMPORT", rows)


def git(repo: Path, *args: str) -> str:
    """git in `repo`, with a committer named (a test's machine may have none set); its output.
    A failing command raises."""
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
                          cwd=repo, check=True, capture_output=True, text=True).stdout
