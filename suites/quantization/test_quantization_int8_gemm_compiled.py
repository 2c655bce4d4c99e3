"""The int8 GEMM compiled for the A100 (sm_80) and the H100 (sm_90) on any machine, as the lab's
GPU runs launch it: int8_gemm itself is called on meta tensors and its autotuned launch is
captured, then every config the autotuner may choose for that launch on that GPU (its own
prune, told the GPU) is compiled. What the throughput claims rest on is read from the SASS:
integer tensor cores (IMMA on sm_80, wgmma's IGMMA on sm_90 wherever a tile has whole
warpgroups), no floating-point tensor core; no config spills; shared memory fits.

Launches: the epilogues the lab uses (int32 out; float scales and bias; int32 bias with the
fixed-point requantize) at a square size and at the CNN's layers (batch 1024, convolutions as
im2col GEMMs: K padded to 16 by the integer model, N as the layer has it). Full: every
epilogue at every shape. Quick: every epilogue on both targets at least once: the requantize
epilogue (the most registers) at the square size, where every tile is a choice, and at fc2, the
layer whose unaligned K spilled most; the int32 epilogue at conv1 and the float one at fc3, thin
layers whose one thin tile compiles in seconds."""

from __future__ import annotations

import pytest
import torch
import triton

from suites.common.launches import captured_launches
from suites.quantization import int8_gemm as gemm_module
from suites.quantization.fixed_point import FixedPointMultiplier
from suites.quantization.int8_gemm import GPU_CONFIGS, Epilogue, configs_for_gpu, int8_gemm

pytestmark = [pytest.mark.quantization, pytest.mark.int8]

TARGETS = {"sm_80": 80, "sm_90": 90}
BATCH = 1024
#: (M, N, K) per shape: a square GEMM, and each layer of CifarCNN at BATCH images.
SHAPES = {"square-4096": (4096, 4096, 4096), "conv1": (BATCH * 28 * 28, 6, 75),
          "conv2": (BATCH * 10 * 10, 16, 150), "fc1": (BATCH, 120, 400),
          "fc2": (BATCH, 84, 120), "fc3": (BATCH, 10, 84)}
EPILOGUES = ["int32", "float", "requantize"]


def launch_of(monkeypatch: pytest.MonkeyPatch, shape: str, epilogue: str):
    """The autotuned launch int8_gemm makes on a GPU for this shape and epilogue."""
    m, n, k = SHAPES[shape]
    meta = torch.device("meta")
    a = torch.empty(m, k, dtype=torch.int8, device=meta)
    b = torch.empty(n, k, dtype=torch.int8, device=meta).t()  # B = W^T, as the model has it
    bias = torch.empty(n, dtype=torch.int32, device=meta)
    monkeypatch.setattr(gemm_module, "interpreting", lambda: False)  # take the GPU's path
    with captured_launches(monkeypatch, gemm_module, "int8_gemm_autotuned") as launches:
        if epilogue == "int32":
            int8_gemm(a, b)
        elif epilogue == "float":
            int8_gemm(a, b, bias=bias, col_scale=torch.empty(n, device=meta))
        else:
            multiplier = FixedPointMultiplier(torch.empty(n, dtype=torch.int32, device=meta),
                                              torch.empty(n, dtype=torch.int32, device=meta))
            int8_gemm(a, b, bias=bias, multiplier=multiplier)
    (launch,) = launches
    return launch


def _config_id(cfg: triton.Config) -> str:
    kw = cfg.kwargs
    return f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}-w{cfg.num_warps}-s{cfg.num_stages}"


#: Quick: each epilogue once at least (the module's docstring says why these shapes).
QUICK = ["square-4096 requantize", "fc2 requantize", "conv1 int32", "fc3 float"]
FULL = [f"{shape} {epilogue}" for shape in SHAPES for epilogue in EPILOGUES]


@pytest.mark.hpml_sweep("gemm", quick=QUICK, full=FULL)
@pytest.mark.parametrize("target", list(TARGETS))
def test_every_config_the_autotuner_may_choose_compiles_clean(hpml, monkeypatch, gemm, target):
    hpml.experiment = "int8 GEMM compiled for each GPU"
    shape, epilogue = gemm.split()
    launch = launch_of(monkeypatch, shape, epilogue)
    k = launch.args[10]
    assert k % 16 == 0, f"K = {k} reached the kernel unpadded"
    named = dict(zip(gemm_module.int8_gemm_kernel.arg_names, launch.args, strict=False))
    choices = configs_for_gpu(GPU_CONFIGS, named, launch.kwargs["EPILOGUE"], TARGETS[target])
    problems = []
    for config in choices:
        with hpml.row(config=_config_id(config)) as row:
            found = row.compile_kernel(gemm_module.int8_gemm_kernel, *launch.args,
                                       target=target, **launch.kwargs, **config.all_kwargs())
        where = _config_id(config)
        if found.spill_bytes:
            problems.append(f"{where} spills {found.spill_bytes} bytes")
        if not found.fits_shared_memory:
            problems.append(f"{where} needs {found.shared} B of shared memory")
        if found.count("HMMA", "HGMMA", "QGMMA"):
            problems.append(f"{where} runs floating-point tensor cores")
        # wgmma needs whole warpgroups (4 warps); 2-warp tiles use mma.sync (IMMA) on sm_90.
        integer = "IGMMA" if target == "sm_90" and config.num_warps % 4 == 0 else "IMMA"
        if not found.count(integer):
            problems.append(f"{where} has no {integer}")
    assert not problems, f"{gemm} on {target}: " + "; ".join(problems)


def test_the_quick_profile_compiles_every_epilogue():
    assert {gemm.split()[1] for gemm in QUICK} == set(EPILOGUES)
    assert set(QUICK) <= set(FULL)


def test_the_requantize_epilogue_is_what_the_gpu_prune_keys_on(monkeypatch):
    # The launch carries the flags the prune reads: the epilogue decides what spills on sm_90.
    launch = launch_of(monkeypatch, "square-4096", "requantize")
    assert launch.kwargs["EPILOGUE"] == Epilogue.REQUANTIZE
    assert launch.kwargs["BIAS"] == 1 and not launch.kwargs["HAS_COL_SCALE"]
