"""The modes of a large family's rows found as arrays (compare/array_modes.py) are modes.modal's,
row by row: random rows of one to three modes, near and far apart, tight and wide, with lone
outliers, in histories of 3 to 30 runs and 1 to 3 processes now; at the gap between modes of
saves on separate occasions and at the narrower one of processes of one occasion."""

from __future__ import annotations

import math
import random

import pytest

from pytest_hpml.compare import modes

np = pytest.importorskip("numpy")
from pytest_hpml.compare import array_modes  # noqa: E402  (numpy first)


def _values(rng: random.Random, count: int, now: int) -> list[float]:
    levels = [rng.uniform(1e-6, 1e-3)]
    for _ in range(rng.choice([0, 0, 1, 1, 2])):
        levels.append(levels[0] * rng.choice([1.12, 1.2, 1.35, 1.6, 2.0, 3.5]))
    spread = rng.choice([0.001, 0.01, 0.05, 0.15])
    values = [rng.choice(levels) * math.exp(rng.gauss(0, spread)) for _ in range(count)]
    if rng.random() < 0.3:  # a preempted call
        values[rng.randrange(count)] *= rng.uniform(2, 20)
    if rng.random() < 0.2:  # this run's processes in a mode of their own
        values[count - now:] = [v * 2.5 for v in values[count - now:]]
    return values


@pytest.mark.parametrize("gap", [modes.MODE_GAP, modes.ONE_OCCASION_GAP])
@pytest.mark.parametrize("shape", [(3, 1), (5, 1), (4, 2), (9, 3), (30, 1)])
def test_the_modes_found_as_arrays_are_those_found_row_by_row(shape: tuple[int, int],
                                                              gap: float) -> None:
    h, k = shape
    rng = random.Random(h * 10 + k)
    rows = [_values(rng, h + k, k) for _ in range(2000)]
    history = np.array([r[:h] for r in rows])
    now = np.array([r[h:] for r in rows])
    modal = array_modes.modal(np, history, now, np.arange(len(rows)), gap)
    found = {int(i): modal.modal(j) for j, i in enumerate(modal.rows)}
    by_row = {i: m for i, r in enumerate(rows)
              if (m := modes.modal(r[:h], r[h:], gap)) is not None}
    assert found.keys() == by_row.keys()
    for i, m in by_row.items():
        assert (found[i].now, found[i].new) == (m.now, m.new)
        assert found[i].stored == pytest.approx(m.stored, rel=1e-12)
    # Each value measured from its nearest stored mode, as Modal.normalized measures it.
    taken = np.concatenate([history, now], axis=1)[modal.rows]
    normalized = modal.normalized(np, taken).tolist()
    for j, i in enumerate(modal.rows.tolist()):
        assert normalized[j] == pytest.approx(by_row[i].normalized(rows[i]), rel=1e-12)
    # Rows of one mode and of several; where processes now are several, some landed in a
    # mode the history does not hold.
    assert 0 < len(by_row) < len(rows)
    assert any(len(m.stored) >= 2 for m in by_row.values())
    assert any(m.new for m in by_row.values()) == (k > 1)
    if h >= 5:
        assert any(len(m.stored) == 3 for m in by_row.values())


def test_only_the_rows_asked_are_split() -> None:
    rows = [[1.0, 1.0, 2.0, 2.0, 1.0], [1.0, 1.01, 1.0, 1.02, 1.0], [3.0, 3.0, 1.0, 1.0, 1.0]]
    history, now = np.array([r[:4] for r in rows]), np.array([r[4:] for r in rows])
    assert array_modes.modal(np, history, now, np.array([0, 1, 2])).rows.tolist() == [0, 2]
    assert array_modes.modal(np, history, now, np.array([2])).rows.tolist() == [2]
    assert array_modes.modal(np, history, now, np.array([1])).rows.tolist() == []
