"""No wrong result passes (issue 21, cases 1 and 2; case 3, reruns that lose the run's own
options, is in test_confirm.py): an infinity on either side of check_close is a mismatch, and
only rows of tests that passed, call and teardown, become the baseline."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST, baseline_file

# -- case 1: a finite value against an infinite reference ---------------------------------------

INFINITIES = """
    import math

    import pytest
    import torch

    @pytest.mark.parametrize("actual, expected", [
        ([1.0, 3.0], [1.0, math.inf]),  # the issue's call: inf <= atol + rtol * inf held
        ([1.0, math.inf], [1.0, 3.0]),
        ([1.0, -math.inf], [1.0, math.inf]),
        ([1.0, math.inf], [1.0, -math.inf]),
    ], ids=["finite-vs-inf", "inf-vs-finite", "-inf-vs-inf", "inf-vs--inf"])
    def test_close(hpml, actual, expected):
        hpml.check_close(torch.tensor(actual), torch.tensor(expected))
"""


def test_an_infinity_on_either_side_of_check_close_fails_saying_where(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(INFINITIES)
    result = pytester.runpytest(*FAST, "--hpml-report=r.json")
    result.assert_outcomes(failed=4)
    result.stdout.fnmatch_lines([
        "*max_rel_error: 1 of 2 non-finite values out of tolerance (rtol=1.3e-06, atol=1e-05); "
        "worst at index 1: actual=3.0, expected=inf*",
        "*1 of 2 non-finite values*worst at index 1: actual=inf, expected=3.0*",
        "*1 of 2 non-finite values*worst at index 1: actual=-inf, expected=inf*",
        "*1 of 2 non-finite values*worst at index 1: actual=inf, expected=-inf*",
    ])
    # The recorded error is an infinity (null in standard JSON), never a NaN that reads as
    # "no error measured".
    records = json.loads((pytester.path / "r.json").read_text())["records"]
    assert [r["metrics"][0]["value"] for r in records] == [None] * 4


def test_equal_finite_values_still_pass(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("""
        import torch

        def test_close(hpml):
            assert hpml.check_close(torch.tensor([1.0, 3.0]), torch.tensor([1.0, 3.0])) == 0
    """)
    pytester.runpytest(*FAST).assert_outcomes(passed=1)


# -- case 2: rows of tests that did not pass never become the baseline ---------------------------

NOT_PASSING = """
    import pytest

    def test_passes(hpml):
        hpml.record("bytes", 1.0, unit="B", better="lower")

    @pytest.mark.xfail(reason="known broken")
    def test_expected_to_fail(hpml):
        hpml.record("bytes", 2.0, unit="B", better="lower")
        assert False

    @pytest.fixture
    def breaks_in_teardown():
        yield
        raise RuntimeError("teardown broke")

    def test_teardown_fails(hpml, breaks_in_teardown):
        hpml.record("bytes", 3.0, unit="B", better="lower")
"""


def test_rows_of_xfail_tests_and_teardown_errors_are_not_saved(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_rows=NOT_PASSING)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    result.assert_outcomes(passed=2, xfailed=1, errors=1)  # teardown: passed, then an error
    result.stdout.fnmatch_lines([
        "hpml: --hpml-save-baseline: 2 row(s) of tests that did not pass (failed, xfail, or an "
        "error in teardown) not saved; their previous baseline entries are kept."])
    stored = json.loads(baseline_file(pytester.path / "baselines").read_text())
    assert [r["id"] for r in stored["records"]] == ["test_rows.py::test_passes"]
