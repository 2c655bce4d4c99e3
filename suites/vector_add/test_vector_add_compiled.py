"""The lab's GPU code compiled for the A100 (sm_80) and the H100 (sm_90) on any machine, no GPU
needed: the Triton kernel as the lab's launcher launches it in each configuration, its
resources recorded (judged exactly by --hpml-compare); the CUDA C++ program built by nvcc for
both GPUs, and its error paths, which need no GPU either."""

from __future__ import annotations

import subprocess

import pytest
import torch
from triton import knobs

from suites.common.launches import captured_launches
from suites.vector_add import cuda_program
from suites.vector_add import kernel as kernel_module
from suites.vector_add.kernel import CONFIGS, vector_add
from suites.vector_add.sizes import GPU_SWEEP, elements

pytestmark = pytest.mark.vector_add

TARGETS = ["sm_80", "sm_90"]


def _launches(monkeypatch: pytest.MonkeyPatch, launch: str) -> list:
    """The kernel launches of configuration `launch` at every K of both sweeps, as the lab's
    launcher makes them (meta tensors: no memory, no GPU)."""
    with captured_launches(monkeypatch, kernel_module, "vector_add_kernel") as launches:
        for k_million in sorted({*GPU_SWEEP["quick"], *GPU_SWEEP["full"]}):
            x = torch.empty(elements(k_million), device="meta")
            vector_add(x, x, torch.empty_like(x), CONFIGS[launch])
    return launches


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("launch", sorted(CONFIGS))
def test_triton_kernel_compiles_for_each_gpu_without_spilling(hpml, monkeypatch, launch, target):
    hpml.experiment = "vector add: the Triton kernel compiled for each GPU"
    launches = _launches(monkeypatch, launch)
    # Every K of the sweeps is a multiple of 16 below 2^31, so Triton's launcher binds them all
    # alike (n an i32 with the divisibility-by-16 attribute): one variant per configuration.
    sizes = [call.args[3] for call in launches]
    assert all(n % 16 == 0 and 1 < n < 2**31 for n in sizes), sizes
    first = launches[0]
    found = hpml.compile_kernel(kernel_module.vector_add_kernel, *first.args, target=target,
                                **first.kwargs)
    assert found.signature["n_elements"] == "i32"
    assert found.spill_bytes == 0
    assert found.fits_shared_memory
    # Both inputs read and the sum written from global memory in the loop.
    assert found.count("LDG") >= 2 and found.count("STG") >= 1


# -- the CUDA C++ program --------------------------------------------------------------------

@pytest.fixture(scope="module")
def built_program():
    try:
        return cuda_program.build()
    except cuda_program.NvccNotFound as exc:
        pytest.skip(str(exc))


def test_cuda_program_is_built_for_the_a100_and_the_h100(built_program):
    listing = subprocess.run([knobs.nvidia.cuobjdump.path, "--list-elf", str(built_program)],
                             capture_output=True, text=True, timeout=120, check=True).stdout
    archs = {word.split(".")[-2] for word in listing.split() if word.endswith(".cubin")}
    assert archs == set(cuda_program.ARCHS), listing


def test_cuda_program_names_a_configuration_it_does_not_know(built_program):
    # Refused inside the program, before any CUDA call: no GPU needed.
    x = torch.ones(8)
    with pytest.raises(RuntimeError, match="unknown launch configuration"):
        cuda_program.cuda_program(x, x, torch.empty(8), "explicit", "d")
    with pytest.raises(ValueError, match="one letter"):
        cuda_program.cuda_program(x, x, torch.empty(8), "explicit", "ab")


def test_cuda_program_reports_the_cuda_error_without_a_gpu(built_program):
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: test_vector_add_gpu runs the program for real")
    x, out = torch.ones(1000), torch.full((1000,), 7.0)
    for memory in ("explicit", "unified"):
        with pytest.raises(RuntimeError, match=rf"\({memory} memory, configuration c\) "
                                               r"failed: .+ \(code \d+\)"):
            cuda_program.cuda_program(x, x, out, memory, "c", poison=True)
    assert (out == 7.0).all()  # nothing was written back
