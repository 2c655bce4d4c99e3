"""forward.py's GPU switch, checked on any machine: true_fp32 puts cuBLAS matmuls and cuDNN
convolutions in IEEE fp32 through torch's fp32_precision API, restores what was there, and
leaves a CPU run alone. The switches are process-wide settings that need no GPU to be read."""

import pytest
import torch

from suites.common.precision import fp32_math
from suites.complexity.forward import true_fp32

pytestmark = pytest.mark.complexity


def _switches() -> tuple[str, str]:
    return torch.backends.cuda.matmul.fp32_precision, torch.backends.cudnn.conv.fp32_precision


def test_true_fp32_runs_cuda_matmuls_and_convolutions_in_ieee_fp32(recwarn):
    before = _switches()
    # A lab (or torch's defaults) may have TF32 on, set through the new API: with the legacy
    # cudnn.allow_tf32 flag, true_fp32 would raise here ("a mix of the legacy and new APIs").
    with fp32_math(matmul="tf32", conv="tf32"):
        with true_fp32(torch.device("cuda")):
            assert _switches() == ("ieee", "ieee")
        assert _switches() == ("tf32", "tf32")
    assert _switches() == before
    assert not [w for w in recwarn if "allow_tf32" in str(w.message)]


def test_true_fp32_leaves_a_cpu_run_as_it_was():
    with fp32_math(matmul="tf32", conv="tf32"):
        with true_fp32(torch.device("cpu")):
            assert _switches() == ("tf32", "tf32")
