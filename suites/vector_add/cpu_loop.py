"""The C++ loop baseline: compiled once per machine with the system compiler (cached, see
build.py), loaded by ctypes."""

from __future__ import annotations

import ctypes
import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from functools import cache
from pathlib import Path

import numpy as np
import torch

from suites.vector_add.build import cached_build

SOURCE = Path(__file__).with_name("cpu_loop.cpp")
FLAGS = ("-O2", "-shared", "-fPIC", "-std=c++17")


class CompilerNotFound(RuntimeError):
    """No C++ compiler on this machine: the C++ baseline cannot be built."""


def find_compiler() -> str | None:
    """$CXX if set, else the first of c++, g++, clang++ on PATH."""
    candidates = [os.environ["CXX"]] if os.environ.get("CXX") else ["c++", "g++", "clang++"]
    for name in candidates:
        path = shutil.which(name)
        if path:
            return path
    return None


def build(compiler: str | None = None, out_dir: Path | None = None) -> Path:
    """Compile cpu_loop.cpp into a shared library (if not already cached) and return its path."""
    compiler = compiler or find_compiler()
    if compiler is None:
        raise CompilerNotFound("no C++ compiler found (tried $CXX, c++, g++, clang++): install "
                               "one (for example `apt-get install g++`) or set CXX")
    return cached_build(SOURCE, compiler, FLAGS, out_dir)


@cache
def library() -> ctypes.CDLL:
    """The compiled baseline, built on first use in this process."""
    lib = ctypes.CDLL(str(build()))
    lib.hpml_alloc_floats.argtypes = [ctypes.c_int64]
    lib.hpml_alloc_floats.restype = ctypes.c_void_p
    lib.hpml_free_floats.argtypes = [ctypes.c_void_p]
    lib.hpml_free_floats.restype = None
    lib.hpml_vector_add.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                    ctypes.c_int64]
    lib.hpml_vector_add.restype = None
    return lib


def float_view(address: int, n: int) -> torch.Tensor:
    """A CPU float32 tensor over n floats at `address` (no copy; the memory is not owned)."""
    if n == 0:
        return torch.empty(0, dtype=torch.float32)
    array = np.ctypeslib.as_array((ctypes.c_float * n).from_address(address))
    return torch.from_numpy(array)


@contextmanager
def malloc_floats(n: int) -> Iterator[torch.Tensor]:
    """n floats of malloc'd host memory, seen as a CPU tensor; free()d on exit, errors included."""
    if n < 0:
        raise ValueError(f"cannot allocate {n} floats: the length must be >= 0")
    lib = library()
    address = lib.hpml_alloc_floats(max(n, 1))
    if not address:
        raise MemoryError(f"malloc of {n} floats ({4 * n / 1e9:.2f} GB) failed")
    try:
        yield float_view(address, n)
    finally:
        lib.hpml_free_floats(address)


@contextmanager
def malloc_arrays(n: int, count: int) -> Iterator[list[torch.Tensor]]:
    """`count` malloc'd arrays of n floats (the lab's host arrays), all free()d on exit."""
    with ExitStack() as stack:
        yield [stack.enter_context(malloc_floats(n)) for _ in range(count)]


def cpu_vector_add(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> None:
    """out = x + y with the compiled C++ loop (contiguous float32 CPU tensors)."""
    for t in (x, y, out):
        if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError("cpu_vector_add needs contiguous float32 CPU tensors, got "
                             f"{t.dtype} on {t.device} (contiguous={t.is_contiguous()})")
    if not (x.numel() == y.numel() == out.numel()):
        raise ValueError(f"lengths differ: {x.numel()}, {y.numel()}, {out.numel()}")
    library().hpml_vector_add(x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel())
