"""The lab's pieces, checked on any machine: launch shapes (and their int32 offsets at the GPU
sizes), STREAM's byte count, the C++ loop. The CUDA pieces, with fakes, are in
test_vector_add_cuda_fakes.py."""

from __future__ import annotations

import math

import pytest
import torch

from suites.vector_add import cpu_loop
from suites.vector_add.kernel import CONFIGS, config, vector_add
from suites.vector_add.sizes import GPU_SWEEP, elements, stream_bytes

pytestmark = pytest.mark.vector_add

GiB = 2**30


# -- launch configurations ------------------------------------------------------------------

@pytest.mark.parametrize("n", [1, 255, 256, 257, 100_000_000])
def test_launch_grids_are_the_labs_three_scenarios(n):
    assert CONFIGS["a"].grid(n) == (1,) and CONFIGS["a"].block == 1
    assert CONFIGS["b"].grid(n) == (1,) and CONFIGS["b"].block == 256
    # (c): enough 256-lane programs to give every element its own lane.
    (programs,) = CONFIGS["c"].grid(n)
    assert programs * 256 >= n > (programs - 1) * 256


@pytest.mark.parametrize("launch", sorted(CONFIGS))
def test_kernel_offsets_fit_int32_at_the_largest_gpu_size(launch):
    # Triton passes an n below 2^31 as an int32, and the kernel's offsets are int32 arithmetic
    # on it: the last loop step computes start + stride (tested against n) and start + BLOCK - 1
    # (masked). The interpreter only sees thousands of elements; the GPU sweep reaches 10^8.
    cfg = CONFIGS[launch]
    n = elements(max(GPU_SWEEP["full"]))
    (n_programs,) = cfg.grid(n)
    stride = n_programs * cfg.block
    last_start = (n - 1) // cfg.block * cfg.block
    assert last_start + stride < 2**31 and last_start + cfg.block - 1 < 2**31


def test_unknown_configuration_names_the_known_ones():
    with pytest.raises(ValueError, match="use one of a, b, c"):
        config("d")


def test_launcher_rejects_mismatched_or_wrong_dtype_inputs():
    x = torch.zeros(8)
    with pytest.raises(ValueError, match="one length"):
        vector_add(x, torch.zeros(9), torch.zeros(8), CONFIGS["c"])
    with pytest.raises(ValueError, match="float32"):
        vector_add(x.double(), x.double(), x.double(), CONFIGS["c"])


# -- STREAM's count and the sweep's sizes ---------------------------------------------------

def test_stream_counts_two_reads_and_one_write_of_four_bytes():
    assert stream_bytes(1_000_000) == 12_000_000


def test_k_million_becomes_an_element_count_and_rejects_less_than_one():
    assert elements(100) == 100_000_000
    assert elements(0.001) == 1000
    with pytest.raises(ValueError, match="less than one element"):
        elements(1e-9)


# -- the C++ loop ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cpp_loop():
    try:
        return cpu_loop.library()
    except cpu_loop.CompilerNotFound as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("n", [0, 1, 7, 1000, 100_003])
def test_cpp_loop_sum_is_bit_exact_with_torch(cpp_loop, n):
    with cpu_loop.malloc_arrays(n, count=3) as (x, y, out):
        x.copy_(torch.randn(n))
        y.copy_(torch.randn(n) * 1e3)
        out.fill_(math.nan)  # poisoned: an element the loop skipped stays NaN
        cpu_loop.cpu_vector_add(x, y, out)
        assert torch.equal(out, x + y)


def test_cpp_loop_is_compiled_once_and_cached(cpp_loop, tmp_path):
    first = cpu_loop.build(out_dir=tmp_path)
    stamp = first.stat().st_mtime_ns
    assert cpu_loop.build(out_dir=tmp_path) == first
    assert first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary files left


def test_missing_compiler_says_what_to_install(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-c++-compiler")
    assert cpu_loop.find_compiler() is None
    with pytest.raises(cpu_loop.CompilerNotFound, match="install"):
        cpu_loop.build()


def test_cpp_loop_rejects_tensors_it_cannot_read(cpp_loop):
    with pytest.raises(ValueError, match="contiguous float32 CPU"):
        cpu_loop.cpu_vector_add(torch.zeros(4, dtype=torch.float64), torch.zeros(4),
                                torch.zeros(4))
