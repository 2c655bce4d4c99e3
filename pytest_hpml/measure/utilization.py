"""How busy the device is while a block of work runs: a background sampler at a fixed interval.

Sources read one snapshot each: NVML (nvidia-ml-py) for a GPU's core and memory utilization,
memory used and SM clock; the process tree's CPU time otherwise (this process and its live
children, such as DataLoader workers, read from /proc where it exists). The sampler is a daemon
thread that is always stopped and joined when the block ends, exceptions included.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from pytest_hpml.machine.nvml import nvml_device


@dataclass(frozen=True)
class Series:
    """One quantity a source reports: its metric name and unit."""

    name: str
    unit: str


class Source(Protocol):
    series: tuple[Series, ...]

    def read(self) -> tuple[float, ...]: ...


class NvmlSource:
    """A GPU, or a MIG instance of one, through NVML: core and memory utilization (%), memory
    used (B), SM clock (Hz), each read where NVML has it. The memory is the instance's own; the
    SM clock its GPU's (an instance has none of its own); utilization the instance's, which
    NVML does not give for a MIG instance: what cannot be read is left out when the source is
    made, said in `unread`, and the rest is sampled."""

    #: Each NVML reading: the series it gives, and how to read them (nvml, instance, GPU).
    READINGS: tuple[tuple[tuple[Series, ...], Callable[[Any, Any, Any], tuple[float, ...]]],
                    ...] = (
        ((Series("gpu_util", "%"), Series("gpu_memory_util", "%")),
         lambda nvml, handle, gpu: _rates(nvml.nvmlDeviceGetUtilizationRates(handle))),
        ((Series("gpu_memory_used", "B"),),
         lambda nvml, handle, gpu: (float(nvml.nvmlDeviceGetMemoryInfo(handle).used),)),
        ((Series("sm_clock", "Hz"),),
         lambda nvml, handle, gpu: (nvml.nvmlDeviceGetClockInfo(gpu, nvml.NVML_CLOCK_SM) * 1e6,)),
    )

    def __init__(self, handle: Any, nvml: Any, gpu: Any | None = None) -> None:
        self.handle = handle
        self.gpu = handle if gpu is None else gpu
        self.nvml = nvml
        self.unread: list[str] = []  # "gpu_util, gpu_memory_util: <NVML's error>"
        self._readings = []
        for series, read in self.READINGS:
            try:
                read(nvml, self.handle, self.gpu)
            except Exception as exc:  # noqa: BLE001 - NVML_ERROR_NOT_SUPPORTED on MIG, ...
                names = ", ".join(s.name for s in series)
                self.unread.append(f"{names} not sampled ({type(exc).__name__}: {exc})")
                continue
            self._readings.append((series, read))
        self.series = tuple(s for series, _ in self._readings for s in series)

    @classmethod
    def for_device(cls, device: Any) -> NvmlSource | str:
        """The source of a torch CUDA device; or, as text, why NVML cannot give one."""
        found = nvml_device(device)
        return found if isinstance(found, str) else cls(found[1], found[0], found[2])

    def read(self) -> tuple[float, ...]:
        return tuple(v for _, read in self._readings
                     for v in read(self.nvml, self.handle, self.gpu))

    def close(self) -> None:
        """Shut down the NVML start that gave this source its handles (NVML counts them)."""
        nvml, self.nvml = self.nvml, None
        if nvml is not None:
            nvml.nvmlShutdown()


def _rates(rates: Any) -> tuple[float, float]:
    return float(rates.gpu), float(rates.memory)


def _children(pid: int, proc: Path) -> list[int]:
    out = []
    for task in (proc / str(pid) / "task").glob("*"):
        try:
            out += [int(p) for p in (task / "children").read_text().split()]
        except (OSError, ValueError):
            continue
    return out


def process_tree_cpu_seconds(pid: int | None = None, proc: Path = Path("/proc")) -> float:
    """User + system CPU seconds of a process and its live descendants (Linux /proc); the
    process alone (os.times) where /proc is not there."""
    pid = os.getpid() if pid is None else pid
    if not (proc / str(pid) / "stat").exists():
        t = os.times()
        return t.user + t.system
    ticks = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    total, pending, seen = 0.0, [pid], set()
    while pending:
        current = pending.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            # Fields after the command name, which may itself contain spaces and parentheses.
            fields = (proc / str(current) / "stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks  # utime, stime
        except (OSError, IndexError, ValueError):
            continue  # the process ended between listing and reading
        pending += _children(current, proc)
    return total


class ProcessCpuSource:
    """CPU utilization of this process tree, in % of all cores, between two readings."""

    series = (Series("cpu_util", "%"),)

    def __init__(self, cpu_seconds: Callable[[], float] = process_tree_cpu_seconds,
                 now: Callable[[], float] = time.monotonic, cores: int | None = None) -> None:
        self._cpu_seconds = cpu_seconds
        self._now = now
        self._cores = cores or os.cpu_count() or 1
        self._last = (now(), cpu_seconds())

    def read(self) -> tuple[float, ...]:
        wall, cpu = self._now(), self._cpu_seconds()
        last_wall, last_cpu = self._last
        self._last = (wall, cpu)
        elapsed = wall - last_wall
        busy = (cpu - last_cpu) / elapsed / self._cores if elapsed > 0 else 0.0
        return (100.0 * max(busy, 0.0),)


@dataclass
class UtilizationSampler:
    """Samples every source each `interval` seconds in a background thread while active."""

    sources: list[Any]
    interval: float = 0.5
    sleep: Callable[[threading.Event, float], bool] = field(
        default=lambda stop, seconds: stop.wait(seconds))
    times: list[float] = field(default_factory=list)
    values: dict[str, list[float]] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {self.interval}")
        for source in self.sources:
            for s in source.series:
                self.values[s.name] = []
                self.units[s.name] = s.unit
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._started = 0.0

    def _sample(self) -> None:
        row: dict[str, float] = {}
        for source in self.sources:
            try:
                row.update(zip((s.name for s in source.series), source.read(), strict=True))
            except Exception as exc:  # noqa: BLE001 - a failing reading ends this source only
                self.errors.append(f"{type(source).__name__}: {exc}")
                self.sources = [s for s in self.sources if s is not source]
        if row:
            self.times.append(time.monotonic() - self._started)
            for name, value in row.items():
                self.values[name].append(value)

    def _run(self) -> None:
        while not self.sleep(self._stop, self.interval):
            self._sample()

    def start(self) -> UtilizationSampler:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name="hpml-utilization", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> UtilizationSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def mean(self, name: str) -> float:
        values = self.values.get(name) or []
        return sum(values) / len(values) if values else float("nan")
