"""`python -m pytest_hpml compare OLD NEW` on two saved runs of a suite written for
pytest-benchmark (issue 33, item 4): where the two files cannot confirm a regression (one
process a side, nothing measured again) it is "unconfirmed" and the exit status is 0 unless
--fail-unconfirmed; a regression the evidence confirms (a baseline saved from 3 processes)
still fails. Each run is a user project of its own, with -p no:benchmark."""

from __future__ import annotations

import io

import pytest
from hpml_testing import FAST, save_in_processes

from pytest_hpml import cli

# The work is a sleep: a slowdown of sum() over a range was judged "ambiguous (blind)" under a
# CPU hog, whose time-slicing spread the baseline's processes by 36 %. A sleep of 10 ms or more
# is the one figure load does not move by more than a few percent: beside make test's other
# worker and a CPU hog, a 1 ms sleep read 8.8 ms (IQR 66 %) and hid a tenfold slowdown, while a
# 10 ms sleep read 10.4 ms.
SUITE = """
    import time
    from pathlib import Path

    SLOWDOWN_FILE = Path(__file__).with_name("slowdown.txt")
    SLOWDOWN = float(SLOWDOWN_FILE.read_text()) if SLOWDOWN_FILE.exists() else 1.0


    def test_nap(benchmark):
        benchmark(time.sleep, 0.01 * SLOWDOWN)
"""


def _compare(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    return cli.main(["compare", *argv], out), out.getvalue()


def test_a_regression_two_reports_cannot_confirm_is_unconfirmed_and_does_not_fail(
        pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = -p no:benchmark\n")
    pytester.makepyfile(test_naps=SUITE)
    pytester.runpytest(*FAST, "--hpml-report=old.json").assert_outcomes(passed=1)
    (pytester.path / "slowdown.txt").write_text("10")  # ten times as long
    pytester.runpytest(*FAST, "--hpml-report=new.json").assert_outcomes(passed=1)
    old, new = str(pytester.path / "old.json"), str(pytester.path / "new.json")

    status, output = _compare(old, new)
    assert status == 0, output
    assert "1 unconfirmed" in output
    assert "failed the comparison" not in output
    status, table = _compare(old, new, "--format", "csv")  # the CSV carries each basis
    assert status == 0
    assert "in one process a side: the spread between processes is unknown" in table

    status, output = _compare(old, new, "--fail-unconfirmed")
    assert status == 1
    assert "test_naps.py::test_nap time: " in output and "unconfirmed (--fail-unconfirmed)" \
        in output


def test_a_regression_the_evidence_confirms_still_fails(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = -p no:benchmark\n")
    pytester.makepyfile(test_naps=SUITE)
    baselines = pytester.path / "baselines"
    pytester.runpytest(*save_in_processes(3),
                       f"--hpml-baselines={baselines}").assert_outcomes(passed=1)
    (pytester.path / "slowdown.txt").write_text("10")
    pytester.runpytest(*FAST, "--hpml-report=new.json").assert_outcomes(passed=1)
    saved = next(baselines.glob("*.json"))
    status, output = _compare(str(saved), str(pytester.path / "new.json"))
    assert status == 1, output
    assert "1 regressed" in output and "failed the comparison:" in output
