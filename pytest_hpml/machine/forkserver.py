"""The process's one forkserver, shared by the distributed launcher (ranks) and the comparison's
confirmations (fresh pytest processes).

multiprocessing keeps a single forkserver per process, and its preload list is read once, when
the server starts; a later list is ignored. So every user adds to one list here instead of
replacing it, and whoever starts the server first starts it with all that was asked so far.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterable
from multiprocessing import forkserver as server
from typing import Any

_preload: list[str] = []


def available() -> bool:
    return "forkserver" in multiprocessing.get_all_start_methods()


def add_preload(modules: Iterable[str]) -> list[str]:
    """Add modules for the server to import before it forks anything; returns the whole list.

    Takes effect only if the server has not started yet in this process (a started server keeps
    its imports: processes forked from it are then slower to start, never different)."""
    for name in modules:
        if name not in _preload:
            _preload.append(name)
    if available():
        server.set_forkserver_preload(list(_preload))
    return list(_preload)


def context(preload: Iterable[str] = (), torch_context: bool = False) -> Any | None:
    """The forkserver start context with `preload` added to the list, or None where the
    platform has no forkserver. torch_context: torch.multiprocessing's context (tensors sent
    through its queues are shared, not copied)."""
    if not available():
        return None  # pragma: no cover - Windows, macOS spawn-only builds
    add_preload(preload)
    if torch_context:
        import torch.multiprocessing as torch_mp

        return torch_mp.get_context("forkserver")
    return multiprocessing.get_context("forkserver")


def ensure_running() -> None:
    """Start the server now (if it is not running) with the preload list as it stands."""
    if available():
        server.ensure_running()
