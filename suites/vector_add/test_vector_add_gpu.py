"""Lab questions 2-4: the add on the GPU in three launch configurations, with explicit device
memory and with unified (managed) memory, by two implementations: one Triton kernel, and the
handout's CUDA C++ program (vector_add.cu, built with nvcc).

Per case: the time to execute the whole program (allocate, move data, add, bring the sum back,
free), and for the Triton kernel the kernel alone, its bandwidth counted STREAM's way
(3 x 4 bytes x N / kernel time) as a % of the GPU's measured copy bandwidth, and the speedup
over the C++ loop measured in the same test. Every program and kernel run is checked bit for
bit against the C++ loop's sum, with the output poisoned (NaN) first. The tables and charts also
hold the CPU columns (C++ loop, torch) and torch's own CUDA add at the same K.

Kernels are timed with a cold L2 (flushed before every sample): the copy ceiling is an HBM
copy, and at K = 1 the three arrays (12 MB) would otherwise sit in an H100's 50 MB L2 and
inflate the bandwidth and its % of the ceiling.

None of this has run on a GPU yet: the development machine has none (test_vector_add_pieces,
test_vector_add_cuda_fakes and test_vector_add_compiled check what can be checked without one).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pytest
import torch

from pytest_hpml import Recorder, Timing
from suites.vector_add.cpu_loop import cpu_vector_add, malloc_arrays
from suites.vector_add.cuda_memory import cuda_floats
from suites.vector_add.cuda_program import NvccNotFound, cuda_program
from suites.vector_add.cuda_program import library as cuda_program_library
from suites.vector_add.gpu_programs import PROGRAMS
from suites.vector_add.kernel import config, vector_add
from suites.vector_add.rows import (
    NAN,
    fill_inputs,
    record_cpu_adds,
    record_pct_copy_bandwidth,
    require_cpp_loop,
)
from suites.vector_add.sizes import GPU_SWEEP, elements, stream_bytes

pytestmark = pytest.mark.vector_add

#: Configuration (a) walks the array with one lane, one element per step: at hundreds of
#: nanoseconds per step, K = 100 would take tens of seconds per call. It is not run above this
#: K (only the full profile goes there), and the skip says so.
CONFIG_A_MAX_K_MILLION = 10

EXPERIMENT = "vector add on the GPU: explicit vs unified memory"
SWEEP = GPU_SWEEP
PIVOT = dict(index=["k_million"], columns="config",
             metrics=["time", "kernel_time", "bandwidth", "pct_copy_bandwidth"], split="memory")
CHART = dict(x="k_million", y="time", series="config", logx=True, logy=True,
             xlabel="K (million elements)", ylabel="time to execute the program")
EXPLICIT_CHART = pytest.mark.hpml_plot(
    "vector_add_explicit.png", where={"memory": "explicit"},
    title="vector add, explicit memory (cudaMalloc + copies)", **CHART)
UNIFIED_CHART = pytest.mark.hpml_plot(
    "vector_add_unified.png", where={"memory": "unified"},
    title="vector add, unified memory (cudaMallocManaged)", **CHART)
IMPLEMENTATIONS = ["Triton", "CUDA C++"]

Add = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], object]


@pytest.mark.hpml_devices("cuda")
@pytest.mark.hpml(cold_l2=True)
@pytest.mark.hpml_sweep("k_million", **SWEEP)
@pytest.mark.parametrize("memory", ["explicit", "unified"])
@pytest.mark.hpml_pivot(**PIVOT)
@EXPLICIT_CHART
@UNIFIED_CHART
def test_cpu_and_torch_columns_of_the_gpu_tables(hpml, device, memory, k_million):
    """The C++ loop and torch on the CPU at the same K (the CPU lines of each memory mode's chart,
    as the handout asks), and torch.add on the GPU, the vendor's kernel beside the Triton one."""
    hpml.experiment = EXPERIMENT
    require_cpp_loop()
    n = elements(k_million)
    with malloc_arrays(n, count=4) as (x, y, cpu_sum, out):
        fill_inputs(x, y)
        record_cpu_adds(hpml, x, y, cpu_sum, out)
        with hpml.row(config="torch CUDA") as row:
            timing = _time_kernel_alone(row, memory, x, y, cpu_sum,
                                        lambda a, b, c: torch.add(a, b, out=c))
            bandwidth = row.record_bandwidth("bandwidth", stream_bytes(n), timing).value
            record_pct_copy_bandwidth(row, bandwidth, hpml.ceilings.copy_bandwidth(), timing)


@pytest.mark.hpml_devices("cuda")
@pytest.mark.hpml(cold_l2=True)
@pytest.mark.hpml_sweep("k_million", **SWEEP)
@pytest.mark.parametrize("launch", [pytest.param("a", marks=pytest.mark.hpml(min_samples=3)),
                                    "b", "c"])
@pytest.mark.parametrize("memory", ["explicit", "unified"])
@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.hpml_pivot(**PIVOT)
@EXPLICIT_CHART
@UNIFIED_CHART
def test_vector_add_gpu(hpml, device, implementation, memory, launch, k_million):
    if launch == "a" and k_million > CONFIG_A_MAX_K_MILLION:
        pytest.skip(f"configuration (a) is not run above K = {CONFIG_A_MAX_K_MILLION} million: "
                    "one lane takes tens of seconds per call there")
    hpml.experiment = EXPERIMENT
    require_cpp_loop()
    cfg = config(launch)
    if implementation == "CUDA C++":
        try:
            cuda_program_library()
        except NvccNotFound as exc:
            pytest.skip(str(exc))
        program = partial(cuda_program, memory=memory, launch=launch)
    else:
        program = partial(PROGRAMS[memory], cfg=cfg)
    label = cfg.label if implementation == "Triton" else f"CUDA C++ {cfg.label}"
    n = elements(k_million)
    with malloc_arrays(n, count=4) as (x, y, cpu_sum, out), hpml.row(config=label) as row:
        fill_inputs(x, y)
        # The C++ loop's sum is the reference (test_cpu_and_torch_columns_of_the_gpu_tables
        # checks it against torch's), its time the baseline of the speedups.
        cpp = row.time(cpu_vector_add, x, y, cpu_sum, name="cpp_loop_time", clock="host")

        out.fill_(NAN)
        program(x, y, out, poison=True)
        row.check_close(out, cpu_sum, rtol=0, atol=0, name="max_rel_error_program")
        # The whole program returns once the sum is back on the host: the host's clock.
        program_time = row.time(program, x, y, out, clock="host")
        # The timed runs wrote `out` last: checked too, not only the first run above.
        row.check_close(out, cpu_sum, rtol=0, atol=0, name="max_rel_error_program_timed")
        # The speedups are judged as the GPU's times are (timing=): the C++ loop on the host
        # drifts on its own (35 % between a save and a compare on an H200's host), and its
        # verdict is cpp_loop_time's, not a regression of the GPU code.
        row.record("speedup_program", cpp.median / program_time.median, better="higher",
                   timing=program_time,
                   note="speedup_program: C++ loop time / whole-program time")
        if implementation != "Triton":
            return  # the CUDA program is one call: its kernel is not timed apart
        kernel_time = _time_kernel_alone(row, memory, x, y, cpu_sum,
                                         lambda a, b, c: vector_add(a, b, c, cfg))
        bandwidth = row.record_bandwidth("bandwidth", stream_bytes(n), kernel_time).value
        record_pct_copy_bandwidth(row, bandwidth, hpml.ceilings.copy_bandwidth(), kernel_time)
        row.record("speedup_kernel", cpp.median / kernel_time.median, better="higher",
                   timing=kernel_time, note="speedup_kernel: C++ loop time / kernel time")


def _time_kernel_alone(row: Recorder, memory: str, x: torch.Tensor, y: torch.Tensor,
                       cpu_sum: torch.Tensor, add: Add) -> Timing:
    """A kernel by itself (CUDA events, cold L2), its inputs already in place; checked first."""
    managed = memory == "unified"
    with cuda_floats(x.numel(), count=3, managed=managed) as (bx, by, bout):
        dx, dy, dout = bx.device, by.device, bout.device
        if managed:
            bx.host.copy_(x)  # the CPU initializes managed memory, as in the program
            by.host.copy_(y)
            bout.host.fill_(NAN)
        else:
            dx.copy_(x)
            dy.copy_(y)
            dout.fill_(NAN)
        add(dx, dy, dout)
        torch.cuda.synchronize()
        row.check_close(bout.host if managed else dout.cpu(), cpu_sum, rtol=0, atol=0,
                        name="max_rel_error_kernel")
        timing = row.time(add, dx, dy, dout, name="kernel_time")
        # The timed launches wrote the output last (the cold-L2 flush writes elsewhere).
        torch.cuda.synchronize()
        row.check_close(bout.host if managed else dout.cpu(), cpu_sum, rtol=0, atol=0,
                        name="max_rel_error_kernel_timed")
        row.annotate("kernel_time", "kernel_time: L2 flushed before each sample (HBM traffic)")
        if managed:
            row.annotate("kernel_time", "unified: pages already on the GPU (moved there by the "
                         "first call); their migration is in the program's time")
        return timing
