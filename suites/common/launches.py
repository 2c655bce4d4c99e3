"""Kernel launches captured instead of run: what a lab's own launcher passes to its Triton kernel,
so that the kernel is compiled for a GPU target (hpml.compile_kernel) with exactly the arguments
a GPU run would give it. With tensors on the meta device this needs no memory and no GPU."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest


@dataclass(frozen=True)
class Launch:
    """One `kernel[grid](*args, **kwargs)`."""

    grid: Any
    args: tuple
    kwargs: dict[str, Any] = field(default_factory=dict)


class _Recorder:
    def __init__(self) -> None:
        self.launches: list[Launch] = []

    def __getitem__(self, grid: Any) -> Any:
        return lambda *args, **kwargs: self.launches.append(Launch(grid, args, kwargs))


@contextlib.contextmanager
def captured_launches(monkeypatch: pytest.MonkeyPatch, module: Any,
                      name: str) -> Iterator[list[Launch]]:
    """Inside the block, `module.name` (a kernel, or an autotuned kernel) records its launches
    instead of running them; the list fills as the lab's code launches."""
    recorder = _Recorder()
    with monkeypatch.context() as patch:
        patch.setattr(module, name, recorder)
        yield recorder.launches
