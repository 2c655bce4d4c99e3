"""The handout's CUDA C++ program (vector_add.cu), built with nvcc for the A100 (sm_80) and the
H100 (sm_90) into one shared library, and called through ctypes as the lab's third GPU
implementation beside the Triton kernel: host arrays in, the sum back in host memory.

Building needs only nvcc (no GPU); running needs a GPU. The build is cached (build.py).
"""

from __future__ import annotations

import ctypes
import glob
import os
import shutil
from functools import cache
from pathlib import Path

import torch

from suites.vector_add.build import cached_build

SOURCE = Path(__file__).with_name("vector_add.cu")
#: The GPUs the lab runs on: SASS for each, so no JIT compilation happens at the first launch.
ARCHS = ("sm_80", "sm_90")
FLAGS = ("-O2", "-shared", "-Xcompiler", "-fPIC",
         *(flag for arch in ARCHS
           for flag in ("-gencode", f"arch=compute_{arch[3:]},code={arch}")))
MEMORY = {"explicit": 0, "unified": 1}


class NvccNotFound(RuntimeError):
    """No CUDA compiler on this machine: the CUDA C++ program cannot be built."""


def find_nvcc() -> str | None:
    """nvcc on PATH, else under $CUDA_HOME, else in the usual /usr/local/cuda* folders."""
    found = shutil.which("nvcc")
    if found:
        return found
    homes = [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda",
             *sorted(glob.glob("/usr/local/cuda-*"), reverse=True)]
    for home in homes:
        candidate = Path(home) / "bin" / "nvcc"
        if home and candidate.is_file():
            return str(candidate)
    return None


def build(nvcc: str | None = None, out_dir: Path | None = None) -> Path:
    """vector_add.cu as a shared library for every arch of ARCHS (cached); raises NvccNotFound."""
    nvcc = nvcc or find_nvcc()
    if nvcc is None:
        raise NvccNotFound("nvcc not found (PATH, $CUDA_HOME/bin, /usr/local/cuda*/bin): install "
                           "the CUDA toolkit to build the lab's CUDA C++ program")
    return cached_build(SOURCE, nvcc, FLAGS, out_dir)


@cache
def library() -> ctypes.CDLL:
    """The built program, loaded once per process (loading needs no GPU; running does)."""
    lib = ctypes.CDLL(str(build()))
    lib.vector_add_program.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                       ctypes.c_int64, ctypes.c_int, ctypes.c_char, ctypes.c_int]
    lib.vector_add_program.restype = ctypes.c_int
    lib.vector_add_error_string.argtypes = [ctypes.c_int]
    lib.vector_add_error_string.restype = ctypes.c_char_p
    return lib


def cuda_program(x: torch.Tensor, y: torch.Tensor, out: torch.Tensor, memory: str, launch: str,
                 poison: bool = False) -> None:
    """out = x + y by the CUDA C++ program: allocate (cudaMalloc or cudaMallocManaged), move the
    inputs, launch in configuration `launch` ("a", "b", "c"), bring the sum back, free. Returns
    once the sum is in `out`, so a host clock around it times the whole program."""
    for t in (x, y, out):
        if t.device.type != "cpu" or t.dtype != torch.float32 or not t.is_contiguous():
            raise ValueError("the CUDA program takes contiguous float32 host arrays, got "
                             f"{t.dtype} on {t.device}")
    if not x.numel() == y.numel() == out.numel():
        raise ValueError(f"lengths differ: {x.numel()}, {y.numel()}, {out.numel()}")
    if memory not in MEMORY:
        raise ValueError(f"memory is one of {', '.join(MEMORY)}, not {memory!r}")
    if len(launch) != 1:  # the program itself refuses any letter but a, b and c
        raise ValueError(f"launch is one letter, a, b or c, not {launch!r}")
    lib = library()
    code = lib.vector_add_program(x.data_ptr(), y.data_ptr(), out.data_ptr(), x.numel(),
                                  MEMORY[memory], launch.encode(), int(poison))
    if code != 0:
        raise RuntimeError(f"the CUDA program ({memory} memory, configuration {launch}) failed: "
                           f"{lib.vector_add_error_string(code).decode()} (code {code})")
