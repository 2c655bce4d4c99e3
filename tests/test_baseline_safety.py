"""The baseline file's safety: concurrent saves merge under a lock, damaged content is a clear
error naming the file and the metric and is never overwritten, old files are still read, and a
save keeps the file's mode, cleans up after a killed save and survives Ctrl-C."""

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
from hpml_testing import FAST, HERE, ROOT, baseline_file

from pytest_hpml.compare import baselines
from pytest_hpml.compare.baselines import BaselineError, MergePolicy, load, save
from pytest_hpml.results import Metric, Record

EXPERIMENT = """
    def test_copy(hpml):
        hpml.record("bytes", 1000.0, unit="B", better="lower")

    def test_other(hpml):
        hpml.record("time", 1e-3, unit="s", better="lower")
"""


# -- 3: concurrent saves -----------------------------------------------------------------------

SAVER = """
import sys, time
from pathlib import Path
from pytest_hpml.compare import baselines
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
import os, sys, time
from pathlib import Path
from pytest_hpml.compare import baselines
from pytest_hpml.report import files
from pytest_hpml.results import Metric, Record

def slow_fsync(fd):  # the temporary is written, not yet renamed
    Path(sys.argv[2]).write_text("writing")
    time.sleep(60)  # killed here, mid-save
files.os.fsync = slow_fsync
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
import os, time
from pathlib import Path
from pytest_hpml.report import files

real_fsync = files.os.fsync
def slow_fsync(fd):
    if "/baselines/." in os.readlink(f"/proc/self/fd/{fd}"):  # the baseline's temporary,
        Path("saving").write_text("now")                     # written, not yet renamed
        time.sleep(30)  # Ctrl-C arrives here
    real_fsync(fd)
files.os.fsync = slow_fsync
"""


def test_ctrl_c_during_a_save_is_one_line_and_the_file_is_intact(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    pytester.runpytest(*FAST, "--hpml-save-baseline").assert_outcomes(passed=2)
    path = baseline_file(pytester.path / "baselines")
    before = path.read_bytes()
    pytester.makeconftest(CTRL_C_CONFTEST)
    # SIGINT's default action in the child: an xdist worker ignores SIGINT, and an ignored
    # signal stays ignored in the processes it starts.
    proc = subprocess.Popen([sys.executable, "-m", "pytest", *FAST, "--hpml-save-baseline",
                             "--hpml-report=r.json"], cwd=pytester.path,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
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
        save(path, HERE, "quick", _one(value), MergePolicy(keep=2))
    assert load(path).metrics_for("r")["t"].history == [2.0, 3.0]  # the last `keep` runs
    save(path, HERE, "quick", _one(4.0), MergePolicy(reset=True))
    assert load(path).metrics_for("r")["t"].history == [4.0]


def test_saved_files_are_valid_when_reread_under_the_cli(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(EXPERIMENT)
    for _ in range(2):
        pytester.runpytest(*FAST, "--hpml-save-baseline", "--hpml-baseline-runs=5"
                           ).assert_outcomes(passed=2)
    stored = load(baseline_file(pytester.path / "baselines"))
    histories = [len(m["history"]) for r in stored.records.values() for m in r["metrics"]]
    assert histories == [2, 2]


def test_the_lock_file_is_never_committed_with_the_baselines(
        pytester: pytest.Pytester) -> None:
    # A CI job saves into a checkout of its baseline branch and commits it with `git add -A`:
    # the store's lock file used to be committed with the JSON.
    import subprocess

    pytester.makepyfile("""
        def test_copy(hpml):
            hpml.record("bytes", 1000.0, unit="B", better="lower")
    """)
    folder = pytester.path / "baselines"
    folder.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(folder)]
    subprocess.run([*git, "init", "-q"], check=True)
    assert pytester.runpytest("-p", "no:cacheprovider", "--hpml-save-baseline",
                              "--hpml-baseline-processes=1").ret == 0
    subprocess.run([*git, "add", "-A"], check=True)
    staged = subprocess.run([*git, "diff", "--cached", "--name-only"], check=True,
                            capture_output=True, text=True).stdout.split()
    assert [n for n in staged if n.endswith(".json")] and ".gitignore" in staged
    assert not [n for n in staged if n.endswith(".lock")], staged
    assert list(folder.glob(".*.lock"))  # it is there, just ignored
    # A .gitignore of the team's own is theirs.
    (folder / ".gitignore").write_text("mine\n")
    assert pytester.runpytest("-p", "no:cacheprovider", "--hpml-save-baseline",
                              "--hpml-baseline-processes=1").ret == 0
    assert (folder / ".gitignore").read_text() == "mine\n"


def test_a_save_merges_into_the_file_as_read_unless_another_save_rewrote_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A save under the lock uses the file the run read at its start where nothing has
    rewritten it since (a 10 000-row file is not read and checked twice), and reads it again
    where another save landed meanwhile: that save's rows are kept."""
    path = tmp_path / "b.json"

    def row(rid: str, value: float) -> Record:
        return Record(rid, "e", metrics=[Metric("t", value, "s", "lower")])

    save(path, HERE, "quick", [row("a", 1.0)])
    read_at_start = load(path)
    reads: list[Path] = []
    real_load = baselines.load
    monkeypatch.setattr(baselines, "load", lambda p: reads.append(p) or real_load(p))
    save(path, HERE, "quick", [row("a", 1.1)], known=read_at_start)
    assert reads == []
    assert real_load(path).metrics_for("a")["t"].runs == [1.0, 1.1]

    stale = real_load(path)
    save(path, HERE, "quick", [row("b", 2.0)])  # another runner's save lands meanwhile
    reads.clear()
    save(path, HERE, "quick", [row("a", 1.2)], known=stale)
    assert reads == [path]
    merged = real_load(path)
    assert merged.metrics_for("b")["t"].value == 2.0
    assert merged.metrics_for("a")["t"].runs == [1.0, 1.1, 1.2]
