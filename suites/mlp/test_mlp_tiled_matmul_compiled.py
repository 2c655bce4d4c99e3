"""The tiled matmul compiled for the A100 (sm_80) and the H100 (sm_90) on any machine, as the MLP's
training step launches it: the step's GEMMs at the published size (B = 3000, H = 512), captured
from the model's own forward and backward passes on meta tensors, in every tile configuration
the autotuner may pick, in both arithmetics. What the speed claims rest on is read from the
SASS: tf32 runs on tensor cores, IEEE fp32 on FFMAs and no tensor core; no configuration the
autotuner may choose for an arithmetic spills.

Full: every configuration the autotuner may choose, for each of the five GEMMs of the step.
Quick: the same matrix of GEMMs x arithmetics x targets, each GEMM compiled in a share of the
configurations, dealt out in turn, so that every configuration is compiled once per arithmetic
and target and every GEMM at least once (26 compilations instead of 130). A configuration that
spills in one GEMM only (64x64x16-w4-s4 did, in the forward GEMMs on sm_90) is found by the
full run alone."""

from __future__ import annotations

import pytest
import torch

from suites.common.launches import captured_launches
from suites.common.precision import fp32_math
from suites.mlp import model
from suites.mlp import tiled_matmul as tiled
from suites.mlp.tiled_matmul import GPU_CONFIGS, configs_for_precision, tiled_matmul

pytestmark = pytest.mark.mlp

TARGETS = ["sm_80", "sm_90"]
BATCH, HIDDEN = 3000, 512  # the published step (seed report 000)
#: The step's GEMMs in the order the model runs them: forward, then backward.
STEP_GEMMS = ["forward_layer0", "forward_layer1", "backward_dW1", "backward_dA1",
              "backward_dW0"]
#: SASS of the tensor cores for fp32 inputs in tf32: mma.sync (HMMA) on sm_80, wgmma (HGMMA)
#: on sm_90, which needs whole warpgroups (num_warps a multiple of 4: every config here).
TF32_TENSOR_CORES = {"sm_80": ("HMMA",), "sm_90": ("HGMMA", "HMMA")}


def step_launches(monkeypatch: pytest.MonkeyPatch, math: str) -> dict[str, object]:
    """The five launches of one training step in `math`, by GEMM name."""
    meta = torch.device("meta")
    params = model.Params([torch.empty(HIDDEN, model.INPUT_SIZE, device=meta),
                           torch.empty(model.NUM_CLASSES, HIDDEN, device=meta)],
                          [torch.empty(HIDDEN, device=meta),
                           torch.empty(model.NUM_CLASSES, device=meta)])
    X = torch.empty(BATCH, model.INPUT_SIZE, device=meta)
    labels = torch.zeros(BATCH, dtype=torch.int64, device=meta)
    with captured_launches(monkeypatch, tiled, "tiled_matmul_autotuned") as launches:
        with fp32_math(matmul=math):
            cache = model.forward(params, X, tiled_matmul)
            model.backward(params, cache, labels, 1 / BATCH, 1e-4, tiled_matmul)
    assert len(launches) == len(STEP_GEMMS)
    return dict(zip(STEP_GEMMS, launches, strict=True))


def _tile(config) -> str:
    kw = config.kwargs
    tile = f"{kw['BLOCK_M']}x{kw['BLOCK_N']}x{kw['BLOCK_K']}"
    return f"{tile}-w{config.num_warps}-s{config.num_stages}"


def share_of(choices: list, gemm: str, profile: str) -> list:
    """The configurations compiled for `gemm`: all of them in the full profile; in the quick
    one, every len(STEP_GEMMS)-th, starting at the GEMM's place in the step, so that the five
    GEMMs' shares together hold every configuration once."""
    if profile == "full":
        return list(choices)
    return list(choices[STEP_GEMMS.index(gemm)::len(STEP_GEMMS)])


@pytest.mark.hpml_sweep("gemm", quick=STEP_GEMMS, full=STEP_GEMMS)
@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("math", ["tf32", "ieee"])
def test_every_tile_compiles_in_the_asked_arithmetic(hpml, monkeypatch, gemm, math, target):
    hpml.experiment = "MLP: Triton tiled matmul compiled for each GPU"
    launch = step_launches(monkeypatch, math)[gemm]
    assert launch.kwargs == {"INPUT_PRECISION": math}
    # What the autotuner may choose from: its prune, given this launch's arguments.
    named = dict(zip(tiled.tiled_matmul_kernel.arg_names, launch.args, strict=False))
    choices = configs_for_precision(GPU_CONFIGS, named, **launch.kwargs)
    assert 0 < len(choices) < len(GPU_CONFIGS)
    problems = []
    for config in share_of(choices, gemm, hpml.profile):
        with hpml.row(tile=_tile(config)) as row:
            found = row.compile_kernel(tiled.tiled_matmul_kernel, *launch.args, target=target,
                                       **launch.kwargs, **config.all_kwargs())
        where = f"{_tile(config)}"
        if found.spill_bytes:
            problems.append(f"{where} spills {found.spill_bytes} bytes")
        if not found.fits_shared_memory:
            problems.append(f"{where} needs {found.shared} B of shared memory")
        if math == "tf32" and not found.count(*TF32_TENSOR_CORES[target]):
            problems.append(f"{where} has no tensor-core instruction")
        if math == "ieee" and (found.tensor_core_instructions or not found.count("FFMA")):
            problems.append(f"{where} runs on tensor cores, or without FFMA")
    assert not problems, f"{gemm} in {math} on {target}: " + "; ".join(problems)


def test_the_quick_shares_hold_every_configuration_once():
    # What the quick profile's coverage rests on: each arithmetic's configurations dealt out
    # over the five GEMMs, none left out, none twice, no GEMM without one.
    for math in ("tf32", "ieee"):
        choices = configs_for_precision(GPU_CONFIGS, {}, INPUT_PRECISION=math)
        shares = [share_of(choices, gemm, "quick") for gemm in STEP_GEMMS]
        assert all(shares)
        dealt = [id(config) for share in shares for config in share]
        assert sorted(dealt) == sorted(map(id, choices))
        assert share_of(choices, "backward_dA1", "full") == choices
