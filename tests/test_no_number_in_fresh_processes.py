"""A measured inf or NaN in a save's fresh processes or a comparison's confirmation processes
(issue 31 item 1): the run goes on, the tests after it run, the metric is said to be no number
and is never stored as a level."""

from __future__ import annotations

import pytest
from hpml_testing import FAST, baseline_file, strict_json

# The first call of a test (its own process) records FIRST, every later call (a fresh process)
# records LATER: a figure that is a number in one process and inf or NaN in another. (A fresh
# process sends inf as JSON's null: it reads back as nan.)
BY_PROCESS = """
    import os, pathlib

    def value(name):
        calls = pathlib.Path(__file__).with_name(name + ".calls")
        n = int(calls.read_text()) if calls.exists() else 0
        calls.write_text(str(n + 1))
        return float(os.environ["FIRST" if n == 0 else "LATER"])

    def test_inf(hpml):
        hpml.record("rate", float("inf"), unit="1/s")

    def test_nan(hpml):
        hpml.record("loss", float("nan"), better="lower")

    def test_sometimes(hpml):
        hpml.record("rate", value("sometimes"), unit="1/s")

    def test_after(hpml):
        hpml.record("rate", 3.0, unit="1/s")
"""

SAVE3 = ("--hpml-save-baseline", "--hpml-baseline-processes=3", "--hpml-save-budget=all")


def _stored(pytester: pytest.Pytester) -> dict[str, list[str]]:
    document = strict_json(baseline_file(pytester.path / "baselines"))
    return {r["id"]: [m["name"] for m in r["metrics"]] for r in document["records"]}


@pytest.mark.parametrize("workers", [(), ("-n", "2")], ids=["one process", "-n 2"])
def test_a_save_whose_fresh_processes_measure_no_number_goes_on_and_stores_no_level(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
        workers: tuple[str, ...]) -> None:
    pytester.makepyfile(test_x=BY_PROCESS)
    monkeypatch.setenv("FIRST", "3")
    monkeypatch.setenv("LATER", "inf")
    result = pytester.runpytest_subprocess(*FAST, *SAVE3, *workers)
    result.assert_outcomes(passed=4)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "hpml: --hpml-save-baseline: 3 metric(s) are not numbers (NaN or inf: not a level) and "
        "were not saved: *"])
    out = result.stdout.str()
    assert "test_inf rate = inf" in out and "test_nan loss = nan" in out
    assert "test_sometimes rate = 3, nan, nan (2 of 3 processes measured no number)" in out
    assert "INTERNALERROR" not in out
    stored = _stored(pytester)
    assert stored["test_x.py::test_after"] == ["rate"]
    assert stored["test_x.py::test_sometimes"] == []
    assert stored["test_x.py::test_inf"] == []


def test_a_confirmation_process_that_measures_no_number_is_said_so(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    pytester.makepyfile(test_x=BY_PROCESS)
    monkeypatch.setenv("FIRST", "3")
    monkeypatch.setenv("LATER", "3")
    pytester.runpytest_subprocess(*FAST, *SAVE3).assert_outcomes(passed=4)
    for calls in pytester.path.glob("*.calls"):
        calls.unlink()
    # The run's own process reads a third of the level: confirmation processes are started,
    # and they measure inf.
    monkeypatch.setenv("FIRST", "1")
    monkeypatch.setenv("LATER", "inf")
    result = pytester.runpytest_subprocess(*FAST, "--hpml-compare")
    result.assert_outcomes(passed=3, failed=1)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out
    result.stdout.fnmatch_lines(["*test_sometimes rate: 3 -> 1 1/s*process(es): -66.7%, "
                                 "nan (no number), nan (no number)*"])
