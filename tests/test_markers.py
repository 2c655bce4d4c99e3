"""The plugin registers its own markers, and only those: the labs' markers belong to this
repository's configuration (tox.ini), so --strict-markers passes here and elsewhere."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from hpml_testing import without_gpu

import pytest_hpml
from pytest_hpml.selection import PRECISIONS

LABS = ("vector_add", "mlp", "data_parallel", "complexity", "tta", "quantization")
PLUGIN_MARKERS = ("gpu", "multi_gpu(n)", *PRECISIONS, "hpml(**options)",
                  "hpml_sweep(argname, quick, full)", "hpml_pivot(", "hpml_plot(",
                  "hpml_devices(")
ROOT = Path(__file__).resolve().parents[1]


def test_the_plugin_registers_its_markers_and_no_lab(pytester: pytest.Pytester) -> None:
    # pytester's folder is another repository that installs pytest-hpml: no labs there.
    result = pytester.runpytest("--strict-markers", "--markers")
    assert result.ret == 0
    for name in PLUGIN_MARKERS:
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}*"])
    for lab in (*LABS, "slow"):
        result.stdout.no_fnmatch_line(f"@pytest.mark.{lab}:*")


def test_this_repository_registers_its_labs() -> None:
    ini = configparser.ConfigParser()
    ini.read(ROOT / "tox.ini")
    registered = {line.split(":", 1)[0].strip()
                  for line in ini["pytest"]["markers"].strip().splitlines()}
    assert registered == {*LABS, "slow"}


@without_gpu
def test_markers_pass_under_strict_markers(pytester: pytest.Pytester) -> None:
    marks = "".join(f"@pytest.mark.{m}\n" for m in ("gpu", *PRECISIONS))
    pytester.makepyfile(
        f"""
        import pytest

        {marks.replace(chr(10), chr(10) + '        ')}def test_all_marks():
            pass

        @pytest.mark.multi_gpu(2)
        def test_two_gpus():
            pass

        def test_plain():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider",
                                "-W", "error::pytest.PytestUnknownMarkWarning", "-rs")
    assert result.ret == 0, result.stdout.str()
    # No GPU here: gpu and multi_gpu tests are skipped with the reason, the others run.
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU*"])


def test_an_unknown_marker_is_still_caught(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.gpuu
        def test_typo():
            pass
        """
    )
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider")
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*'gpuu' not found in `markers`*"])


def test_precisions_carry_their_marker() -> None:
    import torch

    params = pytest_hpml.precisions("fp32", "bf16", "int8")
    assert [p.values[0] for p in params] == [torch.float32, torch.bfloat16, torch.int8]
    assert [p.id for p in params] == ["fp32", "bf16", "int8"]
    assert [[m.name for m in p.marks] for p in params] == [["fp32"], ["bf16"], ["int8"]]
    with pytest.raises(ValueError, match="fp8"):
        pytest_hpml.precisions("fp8")


def test_precision_marker_selects(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import pytest_hpml

        @pytest.mark.parametrize("dtype", pytest_hpml.precisions("fp64", "fp32", "fp16"))
        def test_dtype(dtype):
            pass
        """
    )
    result = pytester.runpytest("--strict-markers", "-p", "no:cacheprovider", "-m", "fp16",
                                "-v")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.fnmatch_lines(["*test_dtype?fp16? PASSED*"])
