"""The regression check as a team runs it in CI, in a project of its own: a baseline saved on
main, changes compared on pull requests, an intended change accepted by a save, rows and
metrics that vanish, and the terminal summary of a comparison without a report."""

from __future__ import annotations

import json

import pytest
from hpml_testing import FAST, baseline_file

# A latency whose value a file sets: the same in every process of a run, so the verdicts are
# the tolerance's and the levels' alone (the noise model has its own tests).
LATENCY = """
    from pathlib import Path

    def test_tokenizer(hpml):
        us = float(Path("latency_us.txt").read_text())
        hpml.record("latency", us * 1e-6, unit="s", samples=[us * 1e-6] * 20)
"""


def _run(pytester: pytest.Pytester, latency_us: float, *args: str) -> pytest.RunResult:
    (pytester.path / "latency_us.txt").write_text(str(latency_us))
    return pytester.runpytest(*FAST, "--hpml-baseline-processes=3", "--hpml-save-budget=all", *args)


def _stored(pytester: pytest.Pytester, rid: str, name: str) -> dict:
    data = json.loads(baseline_file(pytester.path / "baselines").read_text())
    record = next(r for r in data["records"] if r["id"] == rid)
    return next(m for m in record["metrics"] if m["name"] == name)


def test_accepting_a_change_starts_a_new_level_and_keeps_the_check_sharp(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tok=LATENCY)
    _run(pytester, 215.9, "--hpml-save-baseline").assert_outcomes(passed=1)
    # The tokenizer got 60 % faster: the obvious way to accept it is a save.
    accept = _run(pytester, 86.1, "--hpml-save-baseline")
    accept.assert_outcomes(passed=1)
    accept.stdout.fnmatch_lines(["hpml: --hpml-save-baseline: 1 metric(s) changed beyond what "
                                 "this machine can detect; their history starts at the new "
                                 "level*: test_tok.py::test_tokenizer latency: 215.9 -> "
                                 "86.10 us (improved)"])
    stored = _stored(pytester, "test_tok.py::test_tokenizer", "latency")
    assert stored["history"] == pytest.approx([86.1e-6] * 3)  # the new level only
    assert [(a["before"], a["after"]) for a in stored["accepted"]] == [
        pytest.approx((215.9e-6, 86.1e-6))]
    # The slow tokenizer comes back: a regression, not an ambiguous mix of two levels.
    back = _run(pytester, 215.9, "--hpml-compare", "--hpml-report")
    back.assert_outcomes(failed=1)
    back.stdout.fnmatch_lines(["*test_tokenizer latency: 86.10 -> 215.9 us (+150.8%*",
                               "*latency*86.10 us*215.9 us*+150.8%*regressed*",
                               "*test_tokenizer latency: accepted on 20*: 215.9 us -> 86.10 us"])


def test_an_unchanged_save_appends_to_the_history(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tok=LATENCY)
    for _ in range(2):
        _run(pytester, 100.0, "--hpml-save-baseline").assert_outcomes(passed=1)
    stored = _stored(pytester, "test_tok.py::test_tokenizer", "latency")
    assert len(stored["history"]) == 6 and "accepted" not in stored


def test_a_comparison_without_a_report_names_its_verdicts_in_the_summary(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_tok=LATENCY)
    _run(pytester, 100.0, "--hpml-save-baseline").assert_outcomes(passed=1)
    slow = _run(pytester, 150.0, "--hpml-compare")
    slow.assert_outcomes(failed=1)
    # Detectable: the tolerance, widened by the drift assumed for a baseline of one save.
    slow.stdout.fnmatch_lines(["hpml: regressed: test_tokenizer latency: 100.0 us -> 150.0 us "
                               "(+50.0%, detectable ±1?.?%)"])
    fast = _run(pytester, 50.0, "--hpml-compare")
    fast.assert_outcomes(passed=1)
    fast.stdout.fnmatch_lines(["hpml: improved: test_tokenizer latency: 100.0 us -> 50.00 us "
                               "(-50.0%, detectable ±1?.?%)"])
    same = _run(pytester, 100.0, "--hpml-compare")
    assert "hpml: unchanged" not in same.stdout.str()  # only what a reader must see


# -- nothing that was measured before disappears silently ----------------------------------------

SWEEP = """
    import pytest
    from pathlib import Path

    SIZES = [int(s) for s in Path("sizes.txt").read_text().split()]

    @pytest.mark.parametrize("n", SIZES)
    def test_sweep(hpml, n):
        if n == 0 or Path(f"skip-{n}.txt").exists():
            return  # a branch that no longer records
        hpml.record("time", n * 1e-3, unit="s")
"""


def _sweep(pytester: pytest.Pytester, sizes: str, *args: str) -> pytest.RunResult:
    (pytester.path / "sizes.txt").write_text(sizes)
    return pytester.runpytest(*FAST, *args)


def test_a_test_that_stops_recording_fails_with_its_missing_row(pytester: pytest.Pytester
                                                                ) -> None:
    pytester.makepyfile(test_s=SWEEP)
    _sweep(pytester, "1 2", "--hpml-save-baseline").assert_outcomes(passed=2)
    (pytester.path / "skip-2.txt").write_text("")
    result = _sweep(pytester, "1 2", "--hpml-compare")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_s.py::test_sweep[[]2]: a row of the baseline that this "
                                 "run of the test did not make*--hpml-prune-baseline drops it",
                                 "hpml: missing: test_sweep[[]n=2] time: 2.000 ms -> (not "
                                 "recorded)"])


def test_a_row_a_sweep_no_longer_makes_fails_the_run(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_s=SWEEP)
    _sweep(pytester, "1 2", "--hpml-save-baseline").assert_outcomes(passed=2)
    result = _sweep(pytester, "1", "--hpml-compare")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["hpml: missing: test_sweep[[]n=2] time*",
                                 "hpml: --hpml-compare: 1 row(s) of the baseline that no test "
                                 "makes any more, while their test function still runs*"])
    # A narrowed selection judges only what it ran.
    narrowed = _sweep(pytester, "1", "--hpml-compare", "-k", "test_sweep")
    assert narrowed.ret == pytest.ExitCode.OK


def test_a_deleted_test_is_said_once_and_pruned_only_when_asked(pytester: pytest.Pytester
                                                                ) -> None:
    pytester.makepyfile(test_s=SWEEP, test_old="def test_old(hpml):\n"
                                               "    hpml.record('time', 1e-3, unit='s')\n")
    _sweep(pytester, "1", "--hpml-save-baseline").assert_outcomes(passed=2)
    (pytester.path / "test_old.py").unlink()
    result = _sweep(pytester, "1", "--hpml-compare")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["hpml: in the baseline, not in this suite: 1 row(s) of tests "
                                 "that are gone: test_old.py::test_old; --hpml-save-baseline "
                                 "--hpml-prune-baseline drops them"])
    _sweep(pytester, "1", "--hpml-save-baseline").assert_outcomes(passed=1)
    ids = [r["id"] for r in json.loads(baseline_file(pytester.path / "baselines").read_text())[
        "records"]]
    assert "test_old.py::test_old" in ids  # kept: a save prunes only when told
    pruned = _sweep(pytester, "1", "--hpml-save-baseline", "--hpml-prune-baseline")
    pruned.stdout.fnmatch_lines(["*dropped 1 row(s) of tests that are gone*"])
    ids = [r["id"] for r in json.loads(baseline_file(pytester.path / "baselines").read_text())[
        "records"]]
    assert ids == ["test_s.py::test_sweep[1]"]


def test_a_save_of_part_of_a_row_keeps_the_history_of_the_rest(pytester: pytest.Pytester
                                                                ) -> None:
    pytester.makepyfile(test_m="import pathlib\n\ndef test_m(hpml):\n"
                               "    hpml.record('a', 1.0, better='lower')\n"
                               "    if not pathlib.Path('no-b').exists():\n"
                               "        hpml.record('b', 2.0, better='lower')\n")
    for _ in range(2):
        pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    (pytester.path / "no-b").write_text("")
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    data = json.loads(baseline_file(pytester.path / "baselines").read_text())
    metrics = {m["name"]: m for m in data["records"][0]["metrics"]}
    assert metrics["a"]["history"] == [1.0, 1.0, 1.0]
    assert metrics["b"]["history"] == [2.0, 2.0]  # kept as it was, not dropped


def test_two_rows_with_the_same_columns_are_an_error_naming_them(pytester: pytest.Pytester
                                                                  ) -> None:
    pytester.makepyfile(test_r="def test_r(hpml):\n"
                               "    for _ in range(2):\n"
                               "        with hpml.row(layer='conv') as row:\n"
                               "            row.record('t', 1.0, better='lower')\n")
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*ValueError: hpml.row(layer=conv) twice in test_r.py::test_r:"
                                 " a row is known by its columns*"])


def test_a_metric_recorded_twice_in_a_row_says_so(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_r="def test_r(hpml):\n"
                               "    hpml.record('t', 1.0, better='lower')\n"
                               "    hpml.record('t', 2.0, better='lower')\n")
    result = pytester.runpytest(*FAST, "--hpml-report=report.json")
    result.stdout.fnmatch_lines(["*test_r.py::test_r: t recorded twice in this row: 2 replaced 1"])
    metrics = json.loads((pytester.path / "report.json").read_text())["records"][0]["metrics"]
    assert [(m["name"], m["value"]) for m in metrics] == [("t", 2.0)]  # the last value kept
