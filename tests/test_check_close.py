"""hpml.check_close: tolerances, messages a person can act on, NaN/Inf never passing."""

from __future__ import annotations

import math

import pytest
import torch

from pytest_hpml.measure.tolerances import compare


def test_within_tolerance_passes() -> None:
    expected = torch.linspace(1, 2, 100)
    result = compare(expected * (1 + 1e-4), expected, rtol=1e-3, atol=0)
    assert result.message is None and result.mismatched == 0
    assert result.max_rel_error == pytest.approx(1e-4, rel=1e-3)


def test_out_of_tolerance_names_index_size_and_count() -> None:
    expected = torch.zeros(4, 5)
    actual = expected.clone()
    actual[2, 3] = 0.5
    actual[1, 1] = 0.1
    result = compare(actual, expected, rtol=1e-3, atol=1e-3)
    assert result.mismatched == 2 and result.total == 20
    assert "2 of 20" in result.message
    assert "index (2, 3)" in result.message  # the worst element
    assert "actual=0.5" in result.message and "expected=0.0" in result.message


def test_one_dimensional_index_is_a_plain_number() -> None:
    result = compare([1.0, 2.0, 3.5], [1.0, 2.0, 3.0], rtol=0.01, atol=0)
    assert "1 of 3" in result.message and "index 2:" in result.message


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_never_pass(bad: float) -> None:
    actual = torch.tensor([1.0, bad, 3.0])
    expected = torch.tensor([1.0, bad, 3.0])  # even when the reference has the same value
    result = compare(actual, expected, rtol=1.0, atol=1e9)
    assert result.mismatched == 1
    assert "non-finite" in result.message and "index 1" in result.message


def test_finite_actual_against_nan_expected_fails() -> None:
    result = compare(torch.tensor([1.0, 2.0]), torch.tensor([1.0, math.nan]), rtol=1, atol=1)
    assert result.mismatched == 1 and result.message


def test_a_shape_mismatch_names_both_shapes() -> None:
    result = compare(torch.zeros(2, 3), torch.zeros(3, 2))
    assert "shape mismatch" in result.message
    assert "(2, 3)" in result.message and "(3, 2)" in result.message


def test_zero_tolerances_mean_bit_exact() -> None:
    x = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert compare(x, x.clone(), rtol=0, atol=0).message is None
    nudged = x.clone()
    nudged[1] = torch.nextafter(nudged[1], torch.tensor(3.0, dtype=torch.float64))
    result = compare(nudged, x, rtol=0, atol=0)
    assert result.mismatched == 1 and "index 1" in result.message


def test_integers_are_exact_by_default() -> None:
    assert compare(torch.tensor([1, 2, 3]), torch.tensor([1, 2, 3])).message is None
    assert compare(torch.tensor([1, 2, 4]), torch.tensor([1, 2, 3])).mismatched == 1


def test_dtype_defaults_are_those_of_the_dtype() -> None:
    expected = torch.ones(8, dtype=torch.float16)
    # 5e-4 relative: inside float16's default (1e-3), far outside float32's (1.3e-6).
    assert compare(expected * 1.0005, expected).message is None
    assert compare(expected.float() * 1.0005, expected.float()).message is not None


def test_empty_tensors_are_close() -> None:
    assert compare(torch.zeros(0), torch.zeros(0)).message is None


def test_fixture_check_close_records_and_fails(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import math
        import torch

        def test_close(hpml):
            err = hpml.check_close(torch.ones(3) * 1.001, torch.ones(3), rtol=1e-2, atol=0)
            assert 0.0009 < err < 0.0011

        def test_far(hpml):
            hpml.check_close(torch.tensor([1.0, 5.0]), torch.tensor([1.0, 2.0]), rtol=0, atol=0,
                             name="logits_error")

        def test_nan(hpml):
            hpml.check_close(torch.tensor([math.nan]), torch.tensor([math.nan]))
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--hpml-report")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines([
        "*logits_error: 1 of 2 elements out of tolerance (rtol=0, atol=0); worst at index 1:*",
        "*max_rel_error: 1 of 1 non-finite values out of tolerance*",
    ])
    # The error is a readable message, not a traceback into the plugin.
    assert "tolerances.py" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*max_rel_error*"])  # recorded: a column of the report
