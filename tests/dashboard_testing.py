"""Baseline histories for the dashboard's tests, made by the store itself (baselines.save with
the judge a save uses), with known saves, commits, a sweep, an accepted change and a blind
spot. The values are made up for the test (the dashboard's shape is under test, not a
machine); tools/dashboard_demo.py makes a real history."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from hpml_testing import HERE

from pytest_hpml.compare import baselines, engine
from pytest_hpml.compare.history import MergePolicy
from pytest_hpml.compare.verdicts import Rules
from pytest_hpml.results import Metric, Record, Replicates

ELSEWHERE = {**HERE, "gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 1}
SWEEP = {"k=1": 1e-5, "k=10": 1e-4, "k=100": 1e-3}  # times spanning two decades
SAVES = 7
ACCEPT_AT = 4  # the save (from 0) at which test_tok got twice as fast


def commit_of(save: int, machine: int = 0) -> str:
    return f"{machine:x}{save:x}".ljust(40, "c")


def _row(rid: str, experiment: str, value: float, spread: float = 0.002,
         **params: int) -> Record:
    """A row with a time measured in three processes: the test's own and two fresh ones."""
    return Record(rid, experiment, params=params, metrics=[Metric("time", value, "s", "lower")],
                  replicates={"time": Replicates((value, value * (1 + spread),
                                                  value * (1 - spread)))})


def records_of(save: int, scale: float = 1.0) -> list[Record]:
    wobble = 1 + 0.01 * ((save * 7) % 3 - 1)  # saves differ a little, as on any machine
    records = [_row(f"test_sweep.py::test_k[{k}]", "sweep", v * scale * wobble, k=int(k[2:]))
               for k, v in SWEEP.items()]
    tok = 2e-4 if save < ACCEPT_AT else 1e-4
    records.append(_row("test_tok.py::test_tok", "tokenizer", tok * scale * wobble))
    # A neighbour's load: processes of a save land far apart (a blind spot); the latest save
    # 40 % slower, which such noise cannot tell from nothing (ambiguous).
    noisy = 3e-3 * scale * (1.4 if save == SAVES - 1 else 1.0)
    records.append(_row("test_noise.py::test_noisy", "noise", noisy, spread=0.6))
    return records


def _judged(path: Path, records: list[Record]) -> list[Record]:
    """The rows judged against the file as a save judges them (its new levels)."""
    found = baselines.load(path)
    for record in records:
        engine.judge(record, found.metrics_for(record.id) if found else {}, Rules())
    return records


def family_of(save: int, scale: float = 1.0) -> list[Record]:
    """One test's four rows of one metric (a sweep inside one test: one family), the latest
    save 8 % slower on every row."""
    wobble = (1 + 0.01 * ((save * 7) % 3 - 1)) * (1.08 if save == SAVES - 1 else 1.0)
    rows = [_row(f"test_fam.py::test_sizes[n={n}]", "family", 1e-4 * n * scale * wobble,
                 spread=0.06, n=n)
            for n in (1, 2, 4, 8)]
    for row in rows:
        row.test = "test_fam.py::test_sizes"
    return rows


def make_history(folder: Path, facts: dict = HERE, saves: int = SAVES, scale: float = 1.0,
                 machine: int = 0,
                 records: Callable[[int, float], list[Record]] = records_of) -> Path:
    path = folder / f"{machine}-quick.json"
    for i in range(saves):
        baselines.save(path, facts, "quick", _judged(path, records(i, scale)), MergePolicy(
            when=f"2026-05-{i + 1:02d}T10:00:00+00:00", commit=commit_of(i, machine)))
    return path


def series_count(saves: int = SAVES) -> int:
    return len(records_of(0))
