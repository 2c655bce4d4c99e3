"""Baseline histories for the dashboard's tests, made by the store itself (baselines.save with
the judge a save uses), with known saves, commits, a sweep, an accepted change and a blind
spot. The values are made up for the test (the dashboard's shape is under test, not a
machine); tools/dashboard_demo.py makes a real history."""

from __future__ import annotations

from pathlib import Path

from hpml_testing import HERE

from pytest_hpml.compare import baselines, verdicts
from pytest_hpml.compare.history import MergePolicy
from pytest_hpml.results import Metric, Record

ELSEWHERE = {**HERE, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
SWEEP = {"k=1": 1e-5, "k=10": 1e-4, "k=100": 1e-3}  # times spanning two decades
SAVES = 7
ACCEPT_AT = 4  # the save (from 0) at which test_tok got twice as fast


def commit_of(save: int, machine: int = 0) -> str:
    return f"{machine:x}{save:x}".ljust(40, "c")


def _judge(new: Metric, old: Metric) -> verdicts.Verdict | None:
    return verdicts.compare_metric(new, old)


def _time(value: float, spread: float = 0.002) -> Metric:
    """A time measured in three processes: the test's own and two fresh ones."""
    return Metric("time", value, "s", "lower", runs=[value * (1 + spread), value * (1 - spread)])


def records_of(save: int, scale: float = 1.0) -> list[Record]:
    wobble = 1 + 0.01 * ((save * 7) % 3 - 1)  # saves differ a little, as on any machine
    records = [Record(f"test_sweep.py::test_k[{k}]", "sweep", params={"k": int(k[2:])},
                      metrics=[_time(v * scale * wobble)]) for k, v in SWEEP.items()]
    tok = 2e-4 if save < ACCEPT_AT else 1e-4
    records.append(Record("test_tok.py::test_tok", "tokenizer",
                          metrics=[_time(tok * scale * wobble)]))
    # A neighbour's load: processes of a save land far apart (a blind spot); the latest save
    # 40 % slower, which such noise cannot tell from nothing (ambiguous).
    noisy = 3e-3 * scale * (1.4 if save == SAVES - 1 else 1.0)
    records.append(Record("test_noise.py::test_noisy", "noise",
                          metrics=[_time(noisy, spread=0.6)]))
    return records


def make_history(folder: Path, facts: dict = HERE, saves: int = SAVES, scale: float = 1.0,
                 machine: int = 0) -> Path:
    path = folder / f"{machine}-quick.json"
    for i in range(saves):
        baselines.save(path, facts, "quick", records_of(i, scale), MergePolicy(
            judge=_judge, when=f"2026-05-{i + 1:02d}T10:00:00+00:00",
            commit=commit_of(i, machine)))
    return path


def series_count(saves: int = SAVES) -> int:
    return len(records_of(0))
