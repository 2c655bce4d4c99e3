"""A benchmark whose processes land in one of two modes, as a JSON library's calls took about
2.5 ms in one process and 6.8 ms in the next: here the mode follows the process's string hash
seed (Python randomizes it per interpreter), as a dict's or an interning table's layout can."""

import pytest

SLOW_MODE = hash("bimodal benchmark") % 2 == 1
VALUES = list(range(20_000))


def sort_copies(copies: int) -> int:
    return sum(len(sorted(VALUES, reverse=True)) for _ in range(copies))


@pytest.mark.benchmark(group="modes")
def test_bimodal(benchmark):
    # The same code: which mode a process is in is not the code's doing.
    copies = 5 if SLOW_MODE else 2
    assert benchmark(sort_copies, copies) == copies * len(VALUES)
