"""A save never writes what the next run refuses, and a baseline problem known at the start is
said at the start (issue 21, cases 4, 5, 9, 10 and 16): metrics are checked when recorded by
the rules the loader applies, the merged file before its rename; a damaged file of any shape is
a usage error naming it before any test; a symlinked file is written through."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from hpml_testing import FAST, HERE, baseline_file

from pytest_hpml import read_results
from pytest_hpml.compare.baselines import BaselineError, load, save
from pytest_hpml.results import Metric, Record

MUST_NOT_RUN = "def test_x():\n    raise SystemExit('must not run')\n"
ONE_ROW = "def test_one(hpml):\n    hpml.record('b', 1.0, unit='B', better='lower')\n"


# -- case 4: what hpml.record accepts, the loader reads back --------------------------------------

BAD_METRICS = """
    def test_negative_time(hpml):
        hpml.record("latency", -1e-6, unit="s", better="lower")

    def test_int_name(hpml):
        hpml.record(5, 1.0)

    def test_changed_after_recording(hpml):
        hpml.record("time", 1e-3, unit="s", better="lower").value = -1.0

    def test_good(hpml):
        hpml.record("bytes", 1.0, unit="B", better="lower")
"""


def test_metrics_a_baseline_could_not_hold_fail_their_test_and_the_next_run_is_not_refused(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_bad=BAD_METRICS)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines([
        "*ValueError: metric 'latency': a time of -1e-06 s is negative; a measured time is "
        "never below 0*",
        "*TypeError: metric name 5: a metric is named by a non-empty string*",
        "*hpml: a recorded metric cannot be stored:",
        "*test_bad.py::test_changed_after_recording: metric 'time': a time of -1.0 s is "
        "negative*"])
    stored = load(baseline_file(pytester.path / "baselines"))
    assert list(stored.records) == ["test_bad.py::test_good"]
    # The next runs, a comparison and a save, read the file.
    pytester.runpytest(*FAST, "--hpml-compare", "--hpml-save-baseline", "-k", "good"
                       ).assert_outcomes(passed=1)


def test_a_save_whose_merged_file_the_loader_would_refuse_writes_nothing(
        tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    save(path, HERE, "quick", [Record("r", "e", metrics=[Metric("t", 1.0, "s", "lower")])])
    before = path.read_bytes()
    metric = Metric("t", 2.0, "s", "lower")
    metric.value = -2.0  # past Metric's own check: the save's check is the last line
    with pytest.raises(BaselineError, match=r"the save to .*b\.json was refused: the merged "
                       r"file would be damaged \(record 'r': metric 't': a time of -2\.0 s is "
                       r"negative"):
        save(path, HERE, "quick", [Record("r", "e", metrics=[metric])])
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [".b.json.lock", ".gitignore", "b.json"]


# -- case 5: damaged files of any shape are said before any test ---------------------------------

def _document(**changes: object) -> dict:
    document = {"schema": "pytest-hpml/baseline/2", "fingerprint": dict(HERE),
                "profile": "quick", "records": [{"id": "r", "experiment": "e", "metrics": [
                    {"name": "t", "value": 1.0, "unit": "s", "better": "lower"}]}]}
    document.update(changes)
    return document


DAMAGED = {
    "an int id": (json.dumps(_document(records=[{"id": 7, "experiment": "e", "metrics": []}])),
                  "a record's id is 7, not a string"),
    "a number for the GPU": (json.dumps(_document(fingerprint={**HERE, "gpu": 1})),
                             "fingerprint gpu is 1, not a str"),
    "100000 nested lists": ('{"schema": "pytest-hpml/baseline/2", "records": '
                            + "[" * 100_000 + "]" * 100_000 + "}",
                            "its JSON is nested too deeply to be a baseline"),
}


@pytest.mark.parametrize("option", ["--hpml-compare", "--hpml-save-baseline"])
@pytest.mark.parametrize("damage", list(DAMAGED))
def test_a_damaged_baseline_of_any_shape_is_named_before_any_test(
        pytester: pytest.Pytester, damage: str, option: str) -> None:
    text, what = DAMAGED[damage]
    path = baseline_file(pytester.path / "baselines")
    path.parent.mkdir()
    path.write_text(text)
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"baseline file {path} is damaged ({what}" in result.stderr.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    assert path.read_text() == text
    # read_results, for tools, raises the ValueError it documents, naming the file.
    with pytest.raises(ValueError, match=path.name):
        read_results(path)


# -- case 16: a file of a newer pytest-hpml -------------------------------------------------------

def test_a_baseline_of_a_newer_version_says_so(tmp_path: Path) -> None:
    path = tmp_path / "b.json"
    path.write_text(json.dumps(_document(schema="pytest-hpml/baseline/3")))
    with pytest.raises(BaselineError) as info:
        load(path)
    assert str(info.value) == (
        f"baseline file {path} was written by a newer pytest-hpml (schema "
        "'pytest-hpml/baseline/3'); pytest-hpml 0.2.0 reads schemas up to "
        "'pytest-hpml/baseline/2'. Upgrade pytest-hpml (pip install -U pytest-hpml) to the "
        "version that wrote it; the file was left untouched.")
    path.write_text(json.dumps(_document(schema="something/else/9")))
    with pytest.raises(BaselineError, match="is not a pytest-hpml baseline"):
        load(path)


# -- case 9: what stops a save is said before the tests --------------------------------------------

def test_another_machines_file_at_this_key_stops_a_save_before_the_tests(
        pytester: pytest.Pytester) -> None:
    path = baseline_file(pytester.path / "baselines")
    save(path, HERE, "quick", [Record("r", "e", metrics=[Metric("t", 1.0, "s", "lower")])])
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: --hpml-save-baseline: {path} was recorded on 'test-9000-x4cores', not on "
            "this machine") in result.stderr.str()
    assert "a save never overwrites another machine's baseline" in result.stderr.str()


@pytest.mark.parametrize("where", ["a dangling symlink", "a path under a file"])
def test_a_baselines_folder_a_save_cannot_use_is_said_before_the_tests(
        pytester: pytest.Pytester, where: str) -> None:
    if where == "a dangling symlink":
        os.symlink(pytester.path / "gone", pytester.path / "bl")
        folder, reason = "bl", f"it is a symlink to {pytester.path / 'gone'}, which does not exist"
    else:
        (pytester.path / "file").write_text("")
        folder, reason = "file/bl", "file is a file, not a folder"
    pytester.makepyfile(MUST_NOT_RUN)
    result = pytester.runpytest(*FAST, "--hpml-save-baseline", f"--hpml-baselines={folder}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (f"ERROR: --hpml-save-baseline: cannot save in --hpml-baselines={folder}: {reason}"
            in result.stderr.str())


# -- case 10: a symlinked baseline file is written through ----------------------------------------

def test_a_symlinked_baseline_file_is_merged_through_the_link(pytester: pytest.Pytester) -> None:
    shared = pytester.path / "shared" / "real.json"
    shared.parent.mkdir()
    link = baseline_file(pytester.path / "bl")
    link.parent.mkdir()
    os.symlink(os.path.relpath(shared, link.parent), link)
    pytester.makepyfile(test_one=ONE_ROW)
    for _ in range(2):
        result = pytester.runpytest(*FAST, "--hpml-save-baseline", "--hpml-baselines=bl")
        result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"hpml: wrote bl/{link.name} -> {shared}"])
    assert link.is_symlink() and os.readlink(link) == "../shared/real.json"
    assert load(shared).metrics_for("test_one.py::test_one")["b"].history == [1.0, 1.0]
