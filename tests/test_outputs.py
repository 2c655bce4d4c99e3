"""A run's results are never lost: every output is written on its own, paths are checked before
the tests, files stay standard JSON, NaN where a number was fails, check_close is exact where it
must be (the baseline file's own safety is in test_baseline_safety.py)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hpml_testing import FAST, baseline_file, strict_json

from pytest_hpml import reporting
from pytest_hpml.compare.baselines import load

EXPERIMENT = """
    def test_copy(hpml):
        hpml.record("bytes", 1000.0, unit="B", better="lower")

    def test_other(hpml):
        hpml.record("time", 1e-3, unit="s", better="lower")
"""


# -- 1, 2: results lost at the end of a run -----------------------------------------------------

def test_a_baseline_damaged_during_the_run_loses_no_other_output(
        pytester: pytest.Pytester) -> None:
    # Fine when the run starts, damaged by the time it saves (another job wrote garbage).
    folder = pytester.path / "baselines"
    pytester.makepyfile(EXPERIMENT + f"""
    def test_zz_damage():
        (__import__("pathlib").Path({str(baseline_file(folder))!r})).write_text("{{oops")
    """)
    folder.mkdir()
    result = pytester.runpytest(*FAST, "--hpml-save-baseline", "--hpml-report=out/report.json",
                                "--hpml-export-bencher=out/bmf.json")
    assert result.ret == reporting.OUTPUTS_FAILED
    result.stdout.fnmatch_lines([f"hpml: cannot write {baseline_file(folder)}: baseline file "
                                 "*is not valid JSON*left untouched*"])
    assert strict_json(pytester.path / "out" / "report.json")["records"]
    assert strict_json(pytester.path / "out" / "bmf.json")
    result.stdout.fnmatch_lines(["hpml: wrote out/report.json", "hpml: wrote out/bmf.json",
                                 "*3 passed*"])
    assert baseline_file(folder).read_text() == "{oops"  # never overwritten


def test_an_os_error_at_the_end_is_one_line_and_the_others_are_written(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hpml.report import files

    def denied(path: Path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(files, "write_report", denied)
    pytester.makepyfile(EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-report=out/report.md", "--hpml-save-baseline",
                                "--hpml-export-benchmark-action=out/bench.json")
    assert result.ret == reporting.OUTPUTS_FAILED  # documented: tests passed, outputs did not
    lines = result.stdout.lines
    assert "hpml: cannot write out/report.md: Permission denied" in lines
    assert f"hpml: wrote {baseline_file(pytester.path / 'baselines')}" in lines
    assert "hpml: wrote out/bench.json" in lines  # (no bigger-is-better metric: no such file)
    result.stdout.fnmatch_lines(["*2 passed*"])
    assert "Traceback" not in result.stdout.str()
    assert load(baseline_file(pytester.path / "baselines")) is not None


def test_failed_tests_keep_their_exit_status_when_an_output_fails(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hpml.report import exports

    monkeypatch.setattr(exports, "write_bencher", lambda *a, **k: 1 / 0)
    pytester.makepyfile(EXPERIMENT + "\n    def test_wrong(hpml):\n        assert False\n")
    result = pytester.runpytest(*FAST, "--hpml-export-bencher=bmf.json")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["hpml: cannot write bmf.json: division by zero"])


@pytest.mark.parametrize("option, make, message", [
    ("--hpml-report=blocker/report.md", "file", "blocker is a file, not a folder"),
    ("--hpml-export-bencher=taken", "folder", "it is a folder, and the option takes a file name"),
    ("--hpml-export-benchmark-action=taken", "folder", "it is a folder"),
    ("--hpml-plots=taken", "file", "it is a file, and the option takes a folder"),
])
def test_unwritable_output_paths_are_said_before_any_test_runs(
        pytester: pytest.Pytester, option: str, make: str, message: str) -> None:
    target = pytester.path / option.split("=", 1)[1].split("/")[0]
    if make == "file":
        target.write_text("not a folder")
    else:
        target.mkdir()
    pytester.makepyfile("def test_x():\n    raise SystemExit('must not run')\n")
    result = pytester.runpytest(*FAST, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert f"{option.split('=')[0]}=" in result.stderr.str()


def test_paths_in_read_only_folders_are_refused_up_front(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        if os.access(folder, os.W_OK):
            pytest.skip("running as root: a read-only folder is still writable")
        assert reporting.writable_problem(folder / "r.md").startswith("Permission denied")
    finally:
        folder.chmod(stat.S_IRWXU)


# -- 4: --hpml-baselines must be a folder --------------------------------------------------------

@pytest.mark.parametrize("mode", ["--hpml-compare", "--hpml-save-baseline"])
def test_baselines_option_pointing_at_a_file_is_a_usage_error(
        pytester: pytest.Pytester, mode: str) -> None:
    (pytester.path / "notes.txt").write_text("mine")
    pytester.makepyfile(EXPERIMENT)
    result = pytester.runpytest(*FAST, mode, "--hpml-baselines=notes.txt")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--hpml-baselines=notes.txt is a file; the option takes a folder" in result.stderr.str()
    assert (pytester.path / "notes.txt").read_text() == "mine"


# -- 5, 6: non-finite values ---------------------------------------------------------------------

NON_FINITE = """
    import pytest

    def test_broken(hpml):
        hpml.record("loss", float("nan"), better="lower")
        hpml.record("speedup", float("inf"), better="higher")
        hpml.record("time", 1e-3, unit="s", better="lower", samples=[1e-3, 2e-3])
        # A sample that is no number is a broken measurement: a clear error, not a file.
        with pytest.raises(ValueError, match="metric 'bad': sample 1 is nan"):
            hpml.record("bad", 1e-3, unit="s", samples=[1e-3, float("nan")])
"""


def test_non_finite_values_are_written_as_standard_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(NON_FINITE)
    result = pytester.runpytest(*FAST, "--hpml-report=r.json", "--hpml-save-baseline",
                                "--hpml-export-benchmark-action=bench.json",
                                "--hpml-export-bencher=bmf.json")
    result.assert_outcomes(passed=1)
    for name in ("r.json", "bench.json", "bmf.json"):
        strict_json(pytester.path / name)
    # The one bigger-is-better figure is inf, left out: no file of nothing but an empty list.
    assert not (pytester.path / "bench-bigger.json").exists()
    stored = strict_json(baseline_file(pytester.path / "baselines"))
    names = [m["name"] for r in stored["records"] for m in r["metrics"]]
    assert names == ["time"]  # NaN and inf are left out of the baseline, with a message
    result.stdout.fnmatch_lines(["hpml: --hpml-save-baseline: 2 metric(s) are not numbers "
                                 "(NaN or inf: not a level) and were not saved: "
                                 "*loss = nan*speedup = inf*"])
    result.stdout.fnmatch_lines(["hpml: Bencher: 2 non-finite point(s) left out of the export*"])
    report = strict_json(pytester.path / "r.json")
    loss = next(m for m in report["records"][0]["metrics"] if m["name"] == "loss")
    assert loss["value"] is None


def test_a_failing_check_close_writes_standard_json(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import torch\n\ndef test_t(hpml):\n    hpml.check_close("
                        "torch.tensor([float('nan')]), torch.tensor([1.0]))\n")
    result = pytester.runpytest(*FAST, "--hpml-report=r.json")
    result.assert_outcomes(failed=1)
    strict_json(pytester.path / "r.json")


def test_nan_where_a_number_was_recorded_fails_and_the_table_shows_nan(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import os\n\ndef test_t(hpml):\n    hpml.record('loss', "
                        "float(os.environ.get('LOSS', '0.5')), better='lower')\n")
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=1)
    os.environ["LOSS"] = "nan"
    try:
        result = pytester.runpytest(*FAST, "--hpml-compare", "--hpml-report")
    finally:
        del os.environ["LOSS"]
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*test_t loss: nan where the baseline has 0.5000 (the run "
                                 "produced no number)", "*loss*", "*", "nan"])
    assert "cannot convert" not in result.stdout.str()


# -- 7: check_close on complex numbers, large integers and bad tolerances ------------------------

def test_check_close_compares_complex_parts_and_integers_exactly(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest
        import torch

        def test_complex(hpml):
            hpml.check_close(torch.tensor([1 + 1j]), torch.tensor([1 - 1j]))

        def test_large_int(hpml):
            hpml.check_close(torch.tensor([2**62 + 1]), torch.tensor([2**62]))

        def test_exact_int(hpml):
            hpml.check_close(torch.tensor([2**62, -5]), torch.tensor([2**62, -5]))

        @pytest.mark.parametrize("tol", [dict(rtol=-1e-3), dict(atol=-1.0),
                                         dict(rtol=float("nan"))])
        def test_negative(hpml, tol):
            with pytest.raises(ValueError, match="must be >= 0"):
                hpml.check_close(torch.ones(2), torch.ones(2), **tol)
        """
    )
    result = pytester.runpytest(*FAST)
    result.assert_outcomes(passed=4, failed=2)
    out = result.stdout.str()
    assert "1 of 1 elements out of tolerance (rtol=1.3e-06, atol=1e-05); worst at index 0: " \
           "actual=(1+1j), expected=(1-1j), abs error=2" in out
    assert "1 of 1 elements out of tolerance (rtol=0, atol=0); worst at index 0: " \
           "actual=4611686018427387905, expected=4611686018427387904, abs error=1" in out
