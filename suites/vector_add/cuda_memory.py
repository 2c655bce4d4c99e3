"""Raw CUDA runtime allocations (cudaMalloc, cudaMallocManaged) seen as torch tensors.

torch's caching allocator would turn the lab's "allocate ... free" into a no-op after the first
call, and torch has no managed-memory allocator, so both memory modes allocate through the CUDA
runtime that torch ships (libcudart, loaded with ctypes) and hand the pointer to torch and
Triton through __cuda_array_interface__. Every allocation is freed on exit of `cuda_floats`,
whatever happened inside.
"""

from __future__ import annotations

import ctypes
import glob
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache

import torch

from suites.vector_add.cpu_loop import float_view
from suites.vector_add.sizes import FLOAT32_BYTES

#: cudaMemAttachGlobal: the managed allocation is accessible from any stream on any device.
CUDA_MEM_ATTACH_GLOBAL = 1
#: Share of the GPU's free memory a request may take: the rest is left to the driver, torch's
#: cached blocks and Triton's launches, so that the lab never oversubscribes (which for managed
#: memory would silently turn into page thrashing instead of an error).
MAX_FREE_FRACTION = 0.9


class CudaError(RuntimeError):
    """A CUDA runtime call returned an error code."""


class NotEnoughGpuMemory(MemoryError):
    """The request is larger than the GPU's free memory allows."""


def check_fits(nbytes: int, mem_get_info: Callable[[], tuple[int, int]],
               max_fraction: float = MAX_FREE_FRACTION) -> None:
    """Refuse (before allocating anything) a request larger than max_fraction of free memory.

    mem_get_info returns (free, total) bytes, as torch.cuda.mem_get_info and cudaMemGetInfo do.
    """
    if nbytes < 0:
        raise ValueError(f"cannot allocate {nbytes} bytes")
    free, total = mem_get_info()
    allowed = int(free * max_fraction)
    if nbytes > allowed:
        raise NotEnoughGpuMemory(
            f"asked for {nbytes / 2**30:.2f} GiB of GPU memory but only {free / 2**30:.2f} GiB of "
            f"{total / 2**30:.2f} GiB is free ({max_fraction:.0%} of it may be used): run with a "
            f"smaller size (--hpml-profile quick) or free the GPU first")


def cudart_candidates(cuda_version: str | None = None) -> list[str]:
    """Where libcudart may be, the copy torch itself uses first.

    By soname, the dynamic loader hands back the library torch already loaded (torch links
    libcudart.so.<major>); wheels may carry renamed copies (torchvision.libs), which come last.
    """
    cuda_version = cuda_version if cuda_version is not None else torch.version.cuda
    found: list[str] = []
    if cuda_version:
        found.append(f"libcudart.so.{cuda_version.split('.')[0]}")
    for site in sys.path:
        found += sorted(glob.glob(os.path.join(site, "nvidia", "*", "lib", "libcudart.so.*")))
    found.append("libcudart.so")  # the system's, through the loader's search path
    return list(dict.fromkeys(found))


@cache
def cudart() -> ctypes.CDLL:
    """The CUDA runtime library, with the signatures this module calls."""
    torch.cuda.init()  # load torch's runtime first, so the soname finds that copy
    return load_cudart(cudart_candidates())


def load_cudart(candidates: Iterable[str],
                load: Callable[[str], ctypes.CDLL] = ctypes.CDLL) -> ctypes.CDLL:
    """The first candidate that loads, with argtypes and restype set for every function this
    module calls (without them ctypes would pass a 64-bit size as a C int). Raises CudaError
    listing each candidate and why it did not load."""
    errors = []
    for path in candidates:
        try:
            lib = load(path)
            break
        except OSError as e:
            errors.append(f"{path}: {e}")
    else:
        raise CudaError("could not load the CUDA runtime (libcudart); tried:\n  "
                        + "\n  ".join(errors) + "\ninstall torch's CUDA wheels (nvidia-cuda-"
                        "runtime) or put libcudart.so on LD_LIBRARY_PATH")
    void_pp = ctypes.POINTER(ctypes.c_void_p)
    lib.cudaMalloc.argtypes = [void_pp, ctypes.c_size_t]
    lib.cudaMallocManaged.argtypes = [void_pp, ctypes.c_size_t, ctypes.c_uint]
    lib.cudaFree.argtypes = [ctypes.c_void_p]
    lib.cudaGetErrorString.argtypes = [ctypes.c_int]
    lib.cudaGetErrorString.restype = ctypes.c_char_p
    for name in ("cudaMalloc", "cudaMallocManaged", "cudaFree"):
        getattr(lib, name).restype = ctypes.c_int
    return lib


def _check(lib: ctypes.CDLL, code: int, call: str) -> None:
    if code != 0:
        message = lib.cudaGetErrorString(code).decode()
        raise CudaError(f"{call} failed with CUDA error {code}: {message}")


@dataclass
class CudaFloats:
    """n float32 values of CUDA memory at `address`, exposed through __cuda_array_interface__."""

    address: int
    n: int
    managed: bool

    @property
    def __cuda_array_interface__(self) -> dict:
        return {"shape": (self.n,), "typestr": "<f4", "data": (self.address, False),
                "version": 2, "strides": None}

    @property
    def device(self) -> torch.Tensor:
        """The memory as a CUDA tensor (no copy), for torch ops and Triton launches."""
        return torch.as_tensor(self, device="cuda")

    @property
    def host(self) -> torch.Tensor:
        """Managed memory only: the same bytes as a CPU tensor, for the CPU to read and write."""
        if not self.managed:
            raise ValueError("device memory from cudaMalloc is not addressable by the CPU: "
                             "copy it with .device.cpu() instead")
        return float_view(self.address, self.n)


@contextmanager
def cuda_floats(n: int, count: int, managed: bool,
                mem_get_info: Callable[[], tuple[int, int]] | None = None,
                runtime: ctypes.CDLL | None = None) -> Iterator[list[CudaFloats]]:
    """`count` arrays of n float32 each, from cudaMallocManaged (managed) or cudaMalloc.

    The whole request is checked against free GPU memory before the first allocation; every
    array allocated is cudaFree'd on exit, also when an allocation or the body fails.
    mem_get_info and runtime default to torch.cuda.mem_get_info and libcudart (tests pass fakes).
    """
    if n < 1:
        # A zero-length CUDA array has a null pointer, which torch.as_tensor rejects.
        raise ValueError(f"need at least one element per array, got n={n}")
    check_fits(count * n * FLOAT32_BYTES, mem_get_info or torch.cuda.mem_get_info)
    lib = runtime or cudart()
    arrays: list[CudaFloats] = []
    try:
        for _ in range(count):
            pointer = ctypes.c_void_p()
            nbytes = n * FLOAT32_BYTES
            if managed:
                code = lib.cudaMallocManaged(ctypes.byref(pointer), nbytes,
                                             CUDA_MEM_ATTACH_GLOBAL)
            else:
                code = lib.cudaMalloc(ctypes.byref(pointer), nbytes)
            _check(lib, code, f"{'cudaMallocManaged' if managed else 'cudaMalloc'}({nbytes})")
            arrays.append(CudaFloats(pointer.value, n, managed))
        yield arrays
    finally:
        # cudaFree synchronizes the device first, so no queued kernel outlives its memory.
        # Free every array before reporting any failure, so one bad free leaks nothing else.
        codes = [lib.cudaFree(array.address) for array in arrays]
        for code in codes:
            _check(lib, code, "cudaFree")
