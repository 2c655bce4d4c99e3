"""Option values that used to hang, crash at the end or be silently ignored are usage errors that
say what to write, before any test runs (issue 21, cases 12 to 15)."""

from __future__ import annotations

import pytest
from hpml_testing import FAST

MUST_NOT_RUN = "def test_x():\n    raise SystemExit('must not run')\n"

BAD_VALUES = [
    # case 12: a negative count reran a regressed test forever
    ("--hpml-confirm=-1", "argument --hpml-confirm: '-1' must be >= 0 (0: none)"),
    # case 13: only (0, 1) is a significance level; 0, 1, 5 crashed the end of the run
    ("--hpml-alpha=0", "argument --hpml-alpha: '0': the significance level is a probability "
     "between 0 and 1 (exclusive); typical values are 0.01 (the default) and 0.05"),
    ("--hpml-alpha=1", "argument --hpml-alpha: '1': the significance level is a probability"),
    ("--hpml-alpha=5", "argument --hpml-alpha: '5': the significance level is a probability"),
    # case 14: an infinite cap made every hpml.time fail
    ("--hpml-max-time=inf", "argument --hpml-max-time: 'inf' is not a finite number"),
    ("--hpml-max-time=nan", "argument --hpml-max-time: 'nan' is not a finite number"),
    ("--hpml-target-rse=inf", "argument --hpml-target-rse: 'inf' is not a finite number"),
    # case 15: accepted, then failing at the end or silently ignored
    ("--hpml-report=.md", "argument --hpml-report: '.md' is an extension without a file name; "
     "write e.g. --hpml-report=report.md"),
    ("--hpml-export-bencher=", "argument --hpml-export-bencher: an empty path; give a file or "
     "folder name, or leave the option out"),
    ("--hpml-export-benchmark-action=", "argument --hpml-export-benchmark-action: an empty path"),
    ("--hpml-plots=", "argument --hpml-plots: an empty path"),
    ("--hpml-baselines=", "argument --hpml-baselines: an empty path"),
    # issue 31 item 4: an unset $BASE_REF in CI turned the comparison off silently
    ("--hpml-compare-ref=", "argument --hpml-compare-ref: an empty git ref (an unset "
     "variable?); give a branch, a tag or a commit, e.g. --hpml-compare-ref=origin/main, or "
     "leave the option out"),
    ("--hpml-compare-ref= ", "argument --hpml-compare-ref: an empty git ref"),
]


@pytest.mark.parametrize("option, message", BAD_VALUES, ids=[o for o, _ in BAD_VALUES])
def test_a_bad_value_is_a_usage_error_saying_what_to_write(
        pytester: pytest.Pytester, option: str, message: str) -> None:
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()


def test_a_typical_significance_level_is_accepted(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("def test_x():\n    pass\n")
    pytester.runpytest(*FAST, "--hpml-alpha=0.05", "--hpml-confirm=0").assert_outcomes(passed=1)


def test_reset_baseline_without_a_save_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, "--hpml-reset-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --hpml-reset-baseline restarts the history of the rows a save stores: add "
            "--hpml-save-baseline (or leave the option out)") in result.stderr.str()


def test_prune_baseline_without_a_save_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-prune-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert ("ERROR: --hpml-prune-baseline drops, in a save, the rows of tests that are gone: "
            "add --hpml-save-baseline (or leave the option out)") in result.stderr.str()


@pytest.mark.parametrize("given, said", [
    (("--hpml-compare",), "--hpml-compare would have nothing to compare or save"),
    (("--hpml-save-baseline",), "--hpml-save-baseline would have nothing to save"),
    (("--hpml-compare-ref=HEAD",), "--hpml-compare-ref would have nothing to compare or save"),
])
def test_disable_with_a_comparison_or_a_save_is_a_usage_error(
        pytester: pytest.Pytester, given: tuple[str, ...], said: str) -> None:
    # Issue 31 item 3: every test failed as a row "this run of the test did not make", or the
    # save wrote nothing and said nothing.
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, "--hpml-disable", *given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: --hpml-disable runs benchmarks as plain tests and measures nothing, so "
            f"{said}: leave out one or the other") in result.stderr.str()
