"""The lab's CUDA pieces, checked on a machine without a GPU: the GPU memory guard and the
freeing of CUDA memory on every path (with a fake CUDA runtime), the loading of libcudart and
the calls its signatures let through, the order of the two GPU programs' steps (with fake memory
and kernel)."""
from __future__ import annotations

import ctypes
from contextlib import contextmanager

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from suites.vector_add import gpu_programs as programs
from suites.vector_add.cuda_memory import (
    CudaError,
    CudaFloats,
    NotEnoughGpuMemory,
    check_fits,
    cuda_floats,
    cudart_candidates,
    load_cudart,
)
from suites.vector_add.kernel import CONFIGS

pytestmark = pytest.mark.vector_add

GiB = 2**30

# -- GPU memory: never more than is free, always freed --------------------------------------

def fake_mem_get_info(free: int, total: int = 80 * GiB):
    return lambda: (free, total)


def test_request_within_free_memory_passes():
    check_fits(int(0.9 * 10 * GiB), fake_mem_get_info(10 * GiB))


def test_request_larger_than_free_memory_is_refused_with_the_sizes():
    with pytest.raises(NotEnoughGpuMemory, match=r"1\.20 GiB .* only 1\.00 GiB of 80\.00 GiB"):
        check_fits(int(1.2 * GiB), fake_mem_get_info(1 * GiB))
    # The margin: just over 90 % of free memory is refused too.
    with pytest.raises(NotEnoughGpuMemory):
        check_fits(int(0.95 * GiB), fake_mem_get_info(1 * GiB))


class FakeCudaRuntime:
    """Stands in for libcudart: hands out fake addresses, counts what is still allocated."""

    def __init__(self, fail_on_allocation: int | None = None, fail_free: bool = False):
        self.live: set[int] = set()
        self.allocations = 0
        self.fail_on_allocation = fail_on_allocation
        self.fail_free = fail_free
        self.flags: list[int] = []
        self._next = 0x10000

    def _allocate(self, pointer_ref, nbytes):
        self.allocations += 1
        if self.allocations == self.fail_on_allocation:
            return 2  # cudaErrorMemoryAllocation
        pointer_ref._obj.value = self._next
        self.live.add(self._next)
        self._next += nbytes
        return 0

    def cudaMalloc(self, pointer_ref, nbytes):  # the CUDA runtime's names
        return self._allocate(pointer_ref, nbytes)

    def cudaMallocManaged(self, pointer_ref, nbytes, flags):
        self.flags.append(flags)
        return self._allocate(pointer_ref, nbytes)

    def cudaFree(self, address):
        self.live.discard(address)
        return 1 if self.fail_free else 0

    def cudaGetErrorString(self, code):
        return {1: b"invalid argument", 2: b"out of memory"}[code]


@pytest.mark.parametrize("managed", [False, True], ids=["cudaMalloc", "cudaMallocManaged"])
def test_every_array_is_freed_after_normal_use(managed):
    runtime = FakeCudaRuntime()
    with cuda_floats(1000, count=3, managed=managed, runtime=runtime,
                     mem_get_info=fake_mem_get_info(GiB)) as arrays:
        assert len(runtime.live) == 3
        assert [a.managed for a in arrays] == [managed] * 3
    assert runtime.live == set()
    assert runtime.flags == ([1, 1, 1] if managed else [])  # cudaMemAttachGlobal


def test_every_array_is_freed_when_the_body_fails():
    runtime = FakeCudaRuntime()
    with pytest.raises(RuntimeError, match="kernel failed"):
        with cuda_floats(1000, count=3, managed=True, runtime=runtime,
                         mem_get_info=fake_mem_get_info(GiB)):
            raise RuntimeError("kernel failed")
    assert runtime.live == set()


def test_earlier_arrays_are_freed_when_a_later_allocation_fails():
    runtime = FakeCudaRuntime(fail_on_allocation=3)
    with pytest.raises(CudaError, match="cudaMallocManaged.*out of memory"):
        with cuda_floats(1000, count=3, managed=True, runtime=runtime,
                         mem_get_info=fake_mem_get_info(GiB)):
            pytest.fail("the body must not run when an allocation failed")
    assert runtime.allocations == 3 and runtime.live == set()


def test_a_failing_free_still_frees_the_others_and_is_reported():
    runtime = FakeCudaRuntime(fail_free=True)
    with pytest.raises(CudaError, match="cudaFree.*invalid argument"):
        with cuda_floats(10, count=3, managed=False, runtime=runtime,
                         mem_get_info=fake_mem_get_info(GiB)):
            pass
    assert runtime.live == set()


def test_oversized_request_allocates_nothing():
    runtime = FakeCudaRuntime()
    n = 100_000_000  # 3 arrays x 400 MB = 1.2 GB against 1 GiB free
    with pytest.raises(NotEnoughGpuMemory):
        with cuda_floats(n, count=3, managed=True, runtime=runtime,
                         mem_get_info=fake_mem_get_info(GiB)):
            pytest.fail("must not run")
    assert runtime.allocations == 0


def test_empty_arrays_are_refused_before_any_allocation():
    with pytest.raises(ValueError, match="at least one element"):
        with cuda_floats(0, count=3, managed=True, runtime=FakeCudaRuntime()):
            pass


def test_cuda_array_interface_describes_the_float32_buffer():
    array = CudaFloats(address=0x1234, n=5, managed=False)
    info = array.__cuda_array_interface__
    assert info["shape"] == (5,) and info["typestr"] == "<f4"
    assert info["data"] == (0x1234, False)
    with pytest.raises(ValueError, match="not addressable by the CPU"):
        _ = array.host


def test_managed_memory_is_seen_by_the_cpu_in_place():
    buffer = (ctypes.c_float * 4)(1, 2, 3, 4)  # host memory standing in for a managed range
    array = CudaFloats(address=ctypes.addressof(buffer), n=4, managed=True)
    array.host.mul_(2)  # written through the CPU view ...
    assert list(buffer) == [2, 4, 6, 8]  # ... lands in the same bytes


# -- libcudart: found, loaded once, called with the right C signatures ------------------------

class FakeFunction:
    """A ctypes function pointer stand-in: holds the argtypes and restype set on it."""

    argtypes: list | None = None
    restype: object = "unset"


class FakeCDLL:
    """Stands in for ctypes.CDLL(path): the four functions cuda_memory calls, nothing else (a
    misspelt name raises AttributeError, as a missing symbol does)."""

    def __init__(self, path: str):
        self.path = path
        self.cudaMalloc = FakeFunction()
        self.cudaMallocManaged = FakeFunction()
        self.cudaFree = FakeFunction()
        self.cudaGetErrorString = FakeFunction()


def fake_loader(loadable: set[str]):
    tried: list[str] = []

    def load(path: str) -> FakeCDLL:
        tried.append(path)
        if path not in loadable:
            raise OSError(f"{path}: cannot open shared object file")
        return FakeCDLL(path)
    return load, tried


def test_cudart_candidates_are_tried_in_order_and_the_first_that_loads_wins():
    load, tried = fake_loader({"second.so", "third.so"})
    lib = load_cudart(["first.so", "second.so", "third.so"], load=load)
    assert lib.path == "second.so"
    assert tried == ["first.so", "second.so"]  # the third is never opened


def test_the_installed_cudarts_error_messages_come_back_as_text():
    # The real library (it loads without a GPU), through what load_cudart declares: without
    # restype c_char_p, ctypes would hand back the message's address as an int.
    try:
        lib = load_cudart(cudart_candidates())
    except CudaError as exc:
        pytest.skip(f"no libcudart installed: {exc}")
    assert lib.cudaGetErrorString(2) == b"out of memory"  # cudaErrorMemoryAllocation


def test_no_loadable_cudart_lists_every_candidate_and_its_error():
    load, tried = fake_loader(set())
    with pytest.raises(CudaError, match="could not load the CUDA runtime") as info:
        load_cudart(["libcudart.so.13", "/wheels/libcudart.so.13", "libcudart.so"], load=load)
    assert tried == ["libcudart.so.13", "/wheels/libcudart.so.13", "libcudart.so"]
    for path in tried:
        assert f"{path}: {path}: cannot open shared object file" in str(info.value)
    assert "LD_LIBRARY_PATH" in str(info.value)


def test_the_installed_cudart_answers_through_these_signatures_without_a_gpu():
    # The real library where torch's CUDA wheels put it: it loads on a machine without a GPU,
    # and a call through the declared signatures returns an error code with its message.
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_vector_add_gpu allocates through libcudart for real")
    try:
        lib = load_cudart(cudart_candidates())
    except CudaError as exc:
        pytest.skip(f"no libcudart installed: {exc}")
    with pytest.raises(CudaError, match=r"cudaMalloc\(4000\) failed with CUDA error \d+: \w+"):
        with cuda_floats(1000, count=1, managed=False, runtime=lib,
                         mem_get_info=fake_mem_get_info(GiB)):
            pytest.fail("no allocation can succeed without a GPU")


def test_cudart_is_looked_for_by_the_soname_torch_uses_first():
    found = cudart_candidates("13.0")
    assert found[0] == "libcudart.so.13"
    assert found[-1] == "libcudart.so"


# -- the two GPU programs, step by step --------------------------------------------------------

class FakeArray:
    """A CUDA array of the fake memory: a CPU tensor, the CPU may touch it only if managed."""

    def __init__(self, name: str, n: int, managed: bool):
        self.name, self.managed = name, managed
        self.tensor = torch.full((n,), -1.0)

    @property
    def device(self) -> torch.Tensor:
        return self.tensor

    @property
    def host(self) -> torch.Tensor:
        if not self.managed:
            raise ValueError("cudaMalloc memory is not addressable by the CPU")
        return self.tensor


class ProgramSteps(TorchDispatchMode):
    """Fakes the GPU pieces of gpu_programs.py and logs, in order, what the program does: the
    allocation and free (fake cuda_floats), copies and fills (aten ops, named by buffer), the
    kernel and synchronize."""

    def __init__(self, monkeypatch, kernel_writes: bool = True, kernel_fails: bool = False):
        super().__init__()
        self.log: list[str] = []
        self.names: dict[int, str] = {}
        self.kernel_writes, self.kernel_fails = kernel_writes, kernel_fails
        monkeypatch.setattr(programs, "cuda_floats", self.cuda_floats)
        monkeypatch.setattr(programs, "vector_add", self.vector_add)
        monkeypatch.setattr(programs.torch.cuda, "synchronize", lambda: self.log.append("sync"))

    def name(self, t: torch.Tensor) -> str:
        return self.names.get(t.data_ptr(), "?")

    @contextmanager
    def cuda_floats(self, n: int, count: int, managed: bool):
        arrays = [FakeArray(name, n, managed) for name in ("gx", "gy", "gout")[:count]]
        self.names.update({a.tensor.data_ptr(): a.name for a in arrays})
        self.log.append(f"allocate {count} {'managed' if managed else 'device'}")
        try:
            yield arrays
        finally:
            self.log.append("free")

    def vector_add(self, x, y, out, cfg) -> None:
        self.log.append(f"kernel {self.name(x)} {self.name(y)} {self.name(out)} {cfg.name}")
        if self.kernel_fails:
            raise RuntimeError("launch failed")
        if self.kernel_writes:
            torch.add(x, y, out=out)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func.overloadpacket)
        if name == "aten.copy_":
            self.log.append(f"copy {self.name(args[1])} -> {self.name(args[0])}")
        elif name == "aten.fill_":
            self.log.append(f"fill {self.name(args[0])} {args[1]}")
        return func(*args, **(kwargs or {}))


def _host_arrays(n: int = 300):
    x, y = torch.rand(n), torch.rand(n)
    out = torch.full((n,), 7.0)  # a previous run's sum, as a reused host buffer would hold
    return x, y, out


def _run(steps: ProgramSteps, memory: str, x, y, out, **kwargs) -> None:
    steps.names.update({x.data_ptr(): "x", y.data_ptr(): "y", out.data_ptr(): "out"})
    with steps:
        programs.PROGRAMS[memory](x, y, out, CONFIGS["c"], **kwargs)


EXPECTED_STEPS = {
    "explicit": ["allocate 3 device", "copy x -> gx", "copy y -> gy", "fill gout nan",
                 "kernel gx gy gout c", "copy gout -> out", "free"],
    # Managed memory: the CPU writes the inputs in place, and reads the sum only after the
    # kernel has finished (synchronize), never with a copy of its own to the GPU.
    "unified": ["allocate 3 managed", "copy x -> gx", "copy y -> gy", "fill gout nan",
                "kernel gx gy gout c", "sync", "copy gout -> out", "free"],
}


@pytest.mark.parametrize("memory", ["explicit", "unified"])
def test_program_steps_run_in_order_and_return_the_sum(monkeypatch, memory):
    steps = ProgramSteps(monkeypatch)
    x, y, out = _host_arrays()
    _run(steps, memory, x, y, out, poison=True)
    assert steps.log == EXPECTED_STEPS[memory]
    assert torch.equal(out, x + y)


@pytest.mark.parametrize("memory", ["explicit", "unified"])
def test_program_without_poison_does_not_fill(monkeypatch, memory):
    steps = ProgramSteps(monkeypatch)
    x, y, out = _host_arrays()
    _run(steps, memory, x, y, out)
    assert steps.log == [s for s in EXPECTED_STEPS[memory] if not s.startswith("fill")]
    assert torch.equal(out, x + y)


@pytest.mark.parametrize("memory", ["explicit", "unified"])
def test_poison_reaches_the_host_when_the_kernel_writes_nothing(monkeypatch, memory):
    # A kernel that skips elements must fail the bit-exact check, whatever the buffers held.
    steps = ProgramSteps(monkeypatch, kernel_writes=False)
    x, y, out = _host_arrays()
    _run(steps, memory, x, y, out, poison=True)
    assert out.isnan().all()


@pytest.mark.parametrize("memory", ["explicit", "unified"])
def test_program_frees_its_memory_when_the_kernel_fails(monkeypatch, memory):
    steps = ProgramSteps(monkeypatch, kernel_fails=True)
    x, y, out = _host_arrays()
    with pytest.raises(RuntimeError, match="launch failed"):
        _run(steps, memory, x, y, out, poison=True)
    assert steps.log[-2:] == ["kernel gx gy gout c", "free"]  # nothing copied back
    assert (out == 7.0).all()
