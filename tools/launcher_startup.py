"""What a launch of pytest_hpml.distributed.run_distributed costs before the ranks do any work:
a one-element all_reduce on gloo CPU ranks, timed from the call to its return, several runs
per world size after one that starts the forkserver, with the data-parallel lab's preloads.

    python tools/launcher_startup.py --ranks 2 4 --runs 10

It times whichever pytest_hpml the import path gives: this checkout's (torch's elastic agent,
issue 30), or another's, e.g. the launcher before it (its own processes from a forkserver):

    PYTHONPATH=/path/to/older/checkout python tools/launcher_startup.py --ranks 2 4 --runs 10
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

import pytest_hpml
from pytest_hpml.distributed import preload_for_ranks, run_distributed

sys.path.append(str(Path(__file__).resolve().parents[1]))  # suites/, for the preloads


def one_all_reduce(rank: int, world_size: int) -> float:
    value = torch.ones(1)
    dist.all_reduce(value)
    return float(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    preload_for_ranks(["torchvision", "suites.data_parallel.ranks"])
    print(f"pytest_hpml from {Path(pytest_hpml.__file__).parent}")
    for world_size in args.ranks:
        assert run_distributed(one_all_reduce, world_size) == [world_size] * world_size
        seconds = []
        for _ in range(args.runs):
            start = time.perf_counter()
            run_distributed(one_all_reduce, world_size)
            seconds.append(time.perf_counter() - start)
        print(f"{world_size} ranks: median {statistics.median(seconds) * 1e3:.0f} ms, min "
              f"{min(seconds) * 1e3:.0f} ms, max {max(seconds) * 1e3:.0f} ms "
              f"({args.runs} launches)", flush=True)


if __name__ == "__main__":
    main()
