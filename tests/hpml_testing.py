"""Helpers shared by the plugin's tests (imported by name: tests/ is on sys.path).

In-process pytester runs are used where possible: a subprocess pays the torch import again.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
