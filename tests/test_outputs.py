"""A run's results are never lost: every output is written on its own, paths are checked before
the tests, saves merge under a lock, files stay standard JSON, and bad baseline content is a
clear error naming the file and the metric (issue 13, one test per fault case)."""

from __future__ import annotations

import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hpml_testing import FAST

from pytest_hpml import baselines, reporting
from pytest_hpml.baselines import BaselineError, load, save
from pytest_hpml.fingerprint import fingerprint, machine_key
from pytest_hpml.results import Metric, Record

HERE = {"gpu": None, "gpu_count": 0, "cpu": "Test CPU 9000", "cpu_cores": 4, "torch": "2.9.0"}
ROOT = Path(__file__).resolve().parents[1]

EXPERIMENT = """
    def test_copy(hpml):
        hpml.record("bytes", 1000.0, unit="B", better="lower")

    def test_other(hpml):
        hpml.record("time", 1e-3, unit="s", better="lower")
"""


def strict_json(path: Path) -> object:
    """Parse as JSON.parse does: NaN and Infinity are not JSON."""
    def reject(token: str) -> None:
        raise ValueError(f"{path}: {token} is not standard JSON")
    return json.loads(path.read_text(encoding="utf-8"), parse_constant=reject)


def baseline_file(folder: Path) -> Path:
    return folder / f"{machine_key(fingerprint())}-quick.json"


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
    assert "hpml: wrote out/bench.json" in lines and "hpml: wrote out/bench-bigger.json" in lines
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


# -- 3: concurrent saves -----------------------------------------------------------------------

SAVER = """
import sys, time
from pathlib import Path
from pytest_hpml import baselines
from pytest_hpml.results import Metric, Record

path, who, start = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
records = [Record(f"{who}-{i}", "e", metrics=[Metric("time", 1e-3 + i * 1e-9, "s", "lower")])
           for i in range(2000)]
while time.time() < start:  # both processes save at the same moment
    pass
baselines.save(path, {"cpu": "Test CPU", "cpu_cores": 2}, "quick", records)
"""


@pytest.mark.parametrize("attempt", range(3))
def test_two_processes_saving_at_once_lose_no_rows(tmp_path: Path, attempt: int) -> None:
    script = tmp_path / "saver.py"
    script.write_text(SAVER)
    path = tmp_path / "b.json"
    start = time.time() + 2.0  # both interpreters are up by then
    procs = [subprocess.Popen([sys.executable, str(script), str(path), who, str(start)],
                              cwd=ROOT) for who in ("a", "b")]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    ids = set(load(path).records)
    assert len(ids) == 4000, f"{4000 - len(ids)} rows lost"


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
    for name in ("r.json", "bench.json", "bench-bigger.json", "bmf.json"):
        strict_json(pytester.path / name)
    stored = strict_json(baseline_file(pytester.path / "baselines"))
    names = [m["name"] for r in stored["records"] for m in r["metrics"]]
    assert names == ["time"]  # NaN and inf are left out of the baseline, with a message
    result.stdout.fnmatch_lines(["hpml: --hpml-save-baseline: 2 metric(s) are not finite numbers "
                                 "and were not saved: *loss = nan*speedup = inf*"])
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
    result.stdout.fnmatch_lines(["*test_t loss: nan where the baseline has 0.5 (the run produced "
                                 "no number)", "*loss*", "*", "nan"])
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


# -- 8: damaged baseline content -----------------------------------------------------------------

def _write_baseline(path: Path, metric: dict) -> None:
    record = {"id": "r", "experiment": "e", "metrics": [metric]}
    document = {"schema": baselines.SCHEMA, "fingerprint": HERE, "profile": "quick",
                "records": [record]}
    path.write_text(json.dumps(document).replace('"__BIG__"', "1" + "0" * 400))


@pytest.mark.parametrize("metric, message", [
    ({"name": "time", "value": 1.0, "unit": "s", "samples": [1.0, "fast"]},
     "metric 'time' of 'r': samples hold 'fast', not a finite number"),
    ({"name": "time", "value": 1.0, "unit": "s", "samples": [1.0, math.nan]},
     "metric 'time' of 'r': samples hold nan, not a finite number"),
    ({"name": "bytes", "value": "__BIG__"}, "metric 'bytes' of 'r': value 1000"),
    ({"name": "time", "value": -0.5, "unit": "s"}, "a time of -0.5 s is negative"),
    ({"name": "time", "value": 0.5, "unit": "s", "history": [0.5, None]},
     "history hold None"),
    ({"value": 1.0}, "has a metric without a name"),
])
def test_damaged_metrics_are_errors_naming_the_file_and_the_metric(
        tmp_path: Path, metric: dict, message: str) -> None:
    path = tmp_path / "b.json"
    _write_baseline(path, metric)
    before = path.read_bytes()
    with pytest.raises(BaselineError, match="is damaged") as info:
        load(path)
    assert str(path) in str(info.value) and message in str(info.value)
    assert path.read_bytes() == before


def test_a_damaged_metric_stops_compare_before_any_test(pytester: pytest.Pytester) -> None:
    folder = pytester.path / "baselines"
    folder.mkdir()
    _write_baseline(baseline_file(folder), {"name": "time", "value": 1.0, "unit": "s",
                                            "samples": ["x"]})
    pytester.makepyfile(EXPERIMENT)
    result = pytester.runpytest(*FAST, "--hpml-compare")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "is damaged (metric 'time' of 'r': samples hold 'x'" in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_a_version_1_file_is_still_read_as_one_run(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"schema": "pytest-hpml/baseline/1", "fingerprint": HERE,
                                "profile": "quick", "records": [{"id": "r", "experiment": "e",
                                "metrics": [{"name": "t", "value": 2.0, "unit": "s"}]}]}))
    assert load(path).metrics_for("r")["t"].value == 2.0
    save(path, HERE, "quick", [Record("r", "e", metrics=[Metric("t", 3.0, "s", "lower")])])
    assert load(path).metrics_for("r")["t"].history == [2.0, 3.0]


# -- 11: side effects of a save ------------------------------------------------------------------

def _one(value: float = 1.0) -> list[Record]:
    return [Record("r", "e", metrics=[Metric("t", value, "s", "lower")])]


def test_a_save_keeps_the_files_mode_and_a_new_file_gets_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    old = os.umask(0o022)
    try:
        save(path, HERE, "quick", _one())
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    path.chmod(0o664)
    save(path, HERE, "quick", _one(2.0))
    assert stat.S_IMODE(path.stat().st_mode) == 0o664


KILLED_SAVER = """
import json, os, sys, time
from pathlib import Path
from pytest_hpml import baselines
from pytest_hpml.results import Metric, Record

real_dump = json.dump
def slow_dump(obj, f, **kw):
    real_dump(obj, f, **kw)
    f.flush()
    Path(sys.argv[2]).write_text("writing")
    time.sleep(60)  # killed here, mid-save
baselines.json.dump = slow_dump
baselines.save(Path(sys.argv[1]), {"cpu": "Test CPU 9000", "cpu_cores": 4}, "quick",
               [Record("r", "e", metrics=[Metric("t", 9.0, "s", "lower")])])
"""


def test_sigkill_mid_save_leaves_the_old_file_and_the_next_save_cleans_up(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save(path, HERE, "quick", _one(1.0))
    before = path.read_bytes()
    script, marker = tmp_path / "killed.py", tmp_path / "started"
    script.write_text(KILLED_SAVER)
    proc = subprocess.Popen([sys.executable, str(script), str(path), str(marker)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    orphans = list(tmp_path.glob(".b.json.*.tmp"))
    assert len(orphans) == 1 and path.read_bytes() == before
    save(path, HERE, "quick", _one(2.0))
    assert list(tmp_path.glob(".b.json.*.tmp")) == []
    assert load(path).metrics_for("r")["t"].history == [1.0, 2.0]


CTRL_C_CONFTEST = """
import json, os, time
from pathlib import Path
from pytest_hpml import baselines

real_dump = json.dump
def slow_dump(obj, f, **kw):
    real_dump(obj, f, **kw)
    Path("saving").write_text("now")
    time.sleep(30)  # Ctrl-C arrives here
baselines.json.dump = slow_dump
"""


def test_ctrl_c_during_a_save_is_one_line_and_the_file_is_intact(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=2)
    path = baseline_file(pytester.path / "baselines")
    before = path.read_bytes()
    pytester.makeconftest(CTRL_C_CONFTEST)
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *FAST, "--hpml-save-baseline",
                             "--hpml-report=r.json"], cwd=pytester.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while not (pytester.path / "saving").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert f"hpml: cannot write {path}: interrupted (Ctrl-C)" in out, out
    assert "Traceback" not in out
    assert "hpml: wrote r.json" in out  # the other outputs are still written
    assert path.read_bytes() == before
    assert list(path.parent.glob("*.tmp")) == []


def test_a_save_can_restart_the_history(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    for value in (1.0, 2.0, 3.0):
        save(path, HERE, "quick", _one(value), keep=2)
    assert load(path).metrics_for("r")["t"].history == [2.0, 3.0]  # the last `keep` runs
    save(path, HERE, "quick", _one(4.0), reset=True)
    assert load(path).metrics_for("r")["t"].history == [4.0]


def test_saved_files_are_valid_when_reread_under_the_cli(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    for _ in range(2):
        pytester.runpytest(*FAST, "--hpml-save-baseline", "--hpml-baseline-runs=5"
                           ).assert_outcomes(passed=2)
    stored = load(baseline_file(pytester.path / "baselines"))
    histories = [len(m["history"]) for r in stored.records.values() for m in r["metrics"]]
    assert histories == [2, 2]
