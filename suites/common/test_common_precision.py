"""The fp32 precision switch: the new fp32_precision API where torch has it, the legacy
allow_tf32 flags elsewhere, never both; restored after the block, errors included."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from suites.common.precision import fp32_math, matmul_precision


def _legacy_backends() -> SimpleNamespace:
    return SimpleNamespace(cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=False)),
                           cudnn=SimpleNamespace(allow_tf32=True))


def _new_backends() -> SimpleNamespace:
    return SimpleNamespace(
        cuda=SimpleNamespace(matmul=SimpleNamespace(fp32_precision="ieee",
                                                    allow_tf32="must not be touched")),
        cudnn=SimpleNamespace(conv=SimpleNamespace(fp32_precision="tf32"),
                              allow_tf32="must not be touched"))


def test_new_api_is_used_where_it_exists_and_restored() -> None:
    backends = _new_backends()
    with fp32_math(matmul="tf32", conv="ieee", backends=backends):
        assert backends.cuda.matmul.fp32_precision == "tf32"
        assert backends.cudnn.conv.fp32_precision == "ieee"
    assert backends.cuda.matmul.fp32_precision == "ieee"
    assert backends.cudnn.conv.fp32_precision == "tf32"
    assert backends.cuda.matmul.allow_tf32 == "must not be touched"


def test_legacy_flags_on_older_torch_restored_after_an_error() -> None:
    backends = _legacy_backends()
    with pytest.raises(RuntimeError, match="inside"):
        with fp32_math(matmul="tf32", conv="ieee", backends=backends):
            assert backends.cuda.matmul.allow_tf32 is True
            assert backends.cudnn.allow_tf32 is False
            raise RuntimeError("inside")
    assert backends.cuda.matmul.allow_tf32 is False and backends.cudnn.allow_tf32 is True


def test_none_leaves_a_switch_alone_and_bad_names_are_refused() -> None:
    backends = _new_backends()
    with fp32_math(conv="ieee", backends=backends):
        assert backends.cuda.matmul.fp32_precision == "ieee"
    with pytest.raises(ValueError, match="one of"):
        with fp32_math(matmul="fp16", backends=backends):
            pass


def test_the_installed_torch_takes_it_without_a_warning(recwarn) -> None:
    before = torch.backends.cuda.matmul.fp32_precision
    with fp32_math(matmul="tf32", conv="ieee"):
        pass
    assert torch.backends.cuda.matmul.fp32_precision == before
    assert not [w for w in recwarn if "allow_tf32" in str(w.message)]


@pytest.mark.parametrize("backends", [_legacy_backends, _new_backends], ids=["legacy", "new"])
def test_the_matmul_precision_reads_what_the_block_set(backends) -> None:
    backends = backends()
    for wanted in ("tf32", "ieee"):
        with fp32_math(matmul=wanted, backends=backends):
            assert matmul_precision(backends) == wanted


def test_the_new_apis_inherit_reads_the_global_switch() -> None:
    backends = _new_backends()
    backends.cuda.matmul.fp32_precision = "none"
    backends.fp32_precision = "tf32"
    assert matmul_precision(backends) == "tf32"
    backends.fp32_precision = "none"  # torch's default: full IEEE fp32
    assert matmul_precision(backends) == "ieee"
    assert matmul_precision() in ("tf32", "ieee")  # the installed torch, whatever it says
