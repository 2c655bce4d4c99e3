"""Kernels compiled ahead of time for a GPU target: the cuobjdump parser on recorded outputs
(checked against ptxas -v's own figures for the same cubins), and hpml.compile_kernel as a
user meets it, with no GPU on the machine."""

from __future__ import annotations

import gzip
import re
import textwrap
from pathlib import Path

import pytest
import triton  # noqa: F401 - imported before the inner runs, which may not import it again
from hpml_testing import metrics_by_test, run_with_json

from pytest_hpml.machine.kernels import (
    TARGETS,
    KernelResources,
    gpu_target,
    parse_cuobjdump,
)

# `cuobjdump -res-usage -sass` of two cubins Triton 3.8 built on this machine (no GPU needed),
# and the `ptxas -v` log of the same compilations (Triton's knobs.nvidia.dump_ptxas_log): the
# vector-add kernel for sm_90, and the int8 GEMM's requantize epilogue (128x32x64 tile, an
# unaligned K) for sm_80, which spills.
FIXTURES = Path(__file__).with_name("fixtures")
RECORDED = ["vector-add-sm90", "int8-gemm-requantize-128x32x64-sm80"]


def recorded(name: str) -> tuple[str, str]:
    """(cuobjdump output, ptxas -v log) of a recorded compilation."""
    plain = FIXTURES / f"{name}.cuobjdump.txt"
    dump = (plain.read_text() if plain.exists()
            else gzip.decompress(plain.with_suffix(".txt.gz").read_bytes()).decode())
    return dump, (FIXTURES / f"{name}.ptxas.txt").read_text()


def ptxas_figures(log: str) -> dict[str, int]:
    """What ptxas -v says of the one function it compiled."""
    frame = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                      r"loads", log)
    registers = re.search(r"Used (\d+) registers", log)
    assert frame and registers, log
    return {"stack": int(frame.group(1)), "spill_stores": int(frame.group(2)),
            "spill_loads": int(frame.group(3)), "registers": int(registers.group(1))}


@pytest.mark.parametrize("name", RECORDED)
def test_the_parser_agrees_with_ptxas_on_the_same_cubin(name: str) -> None:
    dump, log = recorded(name)
    (function,) = parse_cuobjdump(dump).values()
    found = {"stack": function.stack, "spill_stores": function.spill_stores,
             "spill_loads": function.spill_loads, "registers": function.registers}
    assert found == ptxas_figures(log)


def test_the_spilling_gemm_is_seen_spilling_on_integer_tensor_cores() -> None:
    (function,) = parse_cuobjdump(recorded(RECORDED[1])[0]).values()
    assert function.spill_stores > 0 and function.spill_loads > 0
    assert function.opcodes["IMMA"] > 0 and function.opcodes["HMMA"] == 0
    (add,) = parse_cuobjdump(recorded(RECORDED[0])[0]).values()
    # Two loads and one store per element step: x, y in, x + y out.
    assert (add.opcodes["LDG"], add.opcodes["STG"], add.opcodes["FADD"]) == (2, 1, 1)
    assert add.spill_stores == add.spill_loads == 0


def test_predicates_and_access_widths_are_read() -> None:
    text = textwrap.dedent("""\
        Function kern:
          REG:40 STACK:24 SHARED:16 LOCAL:0 CONSTANT[0]:400 TEXTURE:0 SURFACE:0 SAMPLER:0
        \t\tFunction : kern
                /*0000*/              STL.128 [R1], R4 ;      /* 0x0000000401007387 */
                /*0010*/         @!P0 STL.U8 [R1+0x10], R2 ;   /* 0x0000100201007387 */
                /*0020*/          @P1 LDL.LU.64 R6, [R1+0x8] ; /* 0x0000080001067983 */
                /*0030*/         @!UP2 LDL R3, [R1+0x4] ;      /* 0x0000040001037983 */
                /*0040*/              HMMA.16816.F32.TF32 R8, R12, R16, R8 ;
                /*0050*/              EXIT ;
        """)
    function = parse_cuobjdump(text)["kern"]
    assert (function.registers, function.stack, function.static_shared) == (40, 24, 16)
    assert (function.spill_stores, function.spill_loads) == (16 + 1, 8 + 4)
    assert function.opcodes == {"STL": 2, "LDL": 2, "HMMA": 1, "EXIT": 1}


def test_targets_carry_the_programming_guides_limits() -> None:
    # Shared memory per block, opt-in maximum: what Triton's launcher checks a kernel against.
    assert gpu_target("sm_80").max_shared_per_block == 166912
    assert gpu_target("sm_90").max_shared_per_block == 232448
    with pytest.raises(ValueError, match="use one of sm_80, sm_90"):
        gpu_target("sm_89")


def test_resources_become_exact_figures_measured_time_and_settings() -> None:
    resources = KernelResources(
        kernel="k", target=TARGETS["sm_80"], num_warps=4, num_stages=3, registers=96,
        spill_stores=8, spill_loads=4, stack=16, shared=32768,
        opcodes={"IMMA": 64, "LDGSTS": 32, "LDG": 2, "STG": 8, "FFMA": 0},
        compile_seconds=None)
    figures = {f.name: f for f in resources.figures()}
    assert "compile_time" not in figures  # nothing was compiled: Triton's cache had it
    assert {n for n, f in figures.items() if f.kind == "setting"} == {
        "num_warps", "num_stages", "shared_memory_limit"}
    assert figures["spill_bytes"].value == 12 and figures["spill_bytes"].better == "lower"
    assert figures["global_load_instructions"].value == 34
    assert figures["tensor_core_instructions"].better == "higher"
    assert all(f.kind == "exact" for n, f in figures.items()
               if n not in {"num_warps", "num_stages", "shared_memory_limit"})


KERNEL_MODULE = '''
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < tl.cdiv(n, 1)  # tl.cdiv: a library function, interpreted under the plugin
    tl.store(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * factor, mask=mask)
'''

USER_TEST = '''
import pytest
import torch
from my_kernels import scale_kernel


@pytest.mark.parametrize("target", ["sm_80", "sm_90"])
def test_scale_compiles(hpml, target):
    x = torch.empty(4096, device="meta")
    found = hpml.compile_kernel(scale_kernel, x, x, 4096, 2.0, target=target, BLOCK=1024,
                                num_warps=4)
    assert found.spill_bytes == 0 and found.fits_shared_memory
    assert found.signature == {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32",
                               "factor": "fp32"}
    assert found.count("LDG") > 0 and found.count("STG") > 0


def test_a_bad_launch_is_the_compilers_message(hpml):
    x = torch.empty(10, device="meta")
    hpml.compile_kernel(scale_kernel, x, x, 10, 2.0, target="sm_90", BLOCK=1000)
'''


def test_compile_kernel_records_resources_for_each_target(pytester: pytest.Pytester,
                                                          monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(pytester.path / "triton-cache"))
    pytester.makepyfile(my_kernels=KERNEL_MODULE, test_user=USER_TEST)
    pytester.syspathinsert()
    result, document = run_with_json(pytester)
    result.assert_outcomes(passed=2, failed=1)
    # BLOCK=1000 is no power of two: Triton's own error, named, fails the test.
    assert "does not compile for sm_90" in result.stdout.str()
    assert "power of 2" in result.stdout.str()
    rows = metrics_by_test(document)
    for target in ("sm_80", "sm_90"):
        metrics = rows[f"test_user.py::test_scale_compiles[{target}]"]
        assert metrics["registers"]["exact"] and metrics["registers"]["value"] > 0
        assert metrics["spill_bytes"]["value"] == 0
        assert metrics["compile_time"]["value"] > 0 and not metrics["compile_time"].get("exact")
        assert metrics["num_warps"]["kind"] == "setting"
    params = {r["id"]: r["params"] for r in document["records"]}
    assert params["test_user.py::test_scale_compiles[sm_90]"]["kernel"] == "scale_kernel"

    # A second run finds every variant in Triton's cache: nothing is compiled, so there is no
    # compile time to record, and a comparison does not miss it.
    again, second = run_with_json(pytester, "-k", "scale")
    again.assert_outcomes(passed=2)
    metrics = metrics_by_test(second)["test_user.py::test_scale_compiles[sm_90]"]
    assert "compile_time" not in metrics and metrics["registers"]["value"] == \
        rows["test_user.py::test_scale_compiles[sm_90]"]["registers"]["value"]


FMA_MODULE = '''
import triton
import triton.language as tl


@triton.jit
def axpy_kernel(x_ptr, y_ptr, out_ptr, a, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr + offsets, a * tl.load(x_ptr + offsets) + tl.load(y_ptr + offsets))
'''

FMA_TEST = '''
import os

import torch
from axpy import axpy_kernel


def test_axpy(hpml):
    x = torch.empty(1024, device="meta")
    found = hpml.compile_kernel(axpy_kernel, x, x, x, 2.0, target="sm_90", BLOCK=1024)
    said = getattr(found, "fp_fusion", None)
    print("fusion", os.environ.get("TRITON_DEFAULT_FP_FUSION"), said, "FFMA",
          found.count("FFMA"), "FMUL", found.count("FMUL"), "FADD", found.count("FADD"))
'''


@pytest.mark.parametrize("user_says", [None, "1"])
def test_fp_fusion_is_decided_by_the_run_and_recorded(pytester: pytest.Pytester,
                                                      monkeypatch: pytest.MonkeyPatch,
                                                      user_says: str | None) -> None:
    # a * x + y compiles to one FFMA with Triton's fusion on, to FMUL and FADD with it off. A
    # run that leaves it to Triton compiled whatever Triton's default was (on in 3.9, off in
    # 3.10, with a warning meanwhile): the run decides it (off, the interpreter's arithmetic),
    # a user who set TRITON_DEFAULT_FP_FUSION keeps theirs, and the row says which.
    monkeypatch.setenv("TRITON_CACHE_DIR", str(pytester.path / "triton-cache"))
    if user_says is None:
        monkeypatch.delenv("TRITON_DEFAULT_FP_FUSION", raising=False)
    else:
        monkeypatch.setenv("TRITON_DEFAULT_FP_FUSION", user_says)
    pytester.makepyfile(axpy=FMA_MODULE, test_user=FMA_TEST)
    pytester.syspathinsert()
    result, document = run_with_json(pytester, "-s")
    result.assert_outcomes(passed=1)
    fused = user_says == "1"
    line = re.search(r"fusion (\S+) (\S+) FFMA (\d+) FMUL (\d+) FADD (\d+)", result.stdout.str())
    assert line, result.stdout.str()
    assert line.group(1) == ("1" if fused else "0") and line.group(2) == str(fused)
    ffma, fmul, fadd = (int(line.group(i)) for i in (3, 4, 5))
    assert (ffma > 0) is fused and (fmul > 0 and fadd > 0) is not fused
    metrics = metrics_by_test(document)["test_user.py::test_axpy"]
    assert metrics["fp_fusion"]["kind"] == "setting" and metrics["fp_fusion"]["value"] == fused
