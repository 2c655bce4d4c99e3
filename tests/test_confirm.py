"""Confirmation reruns: which options travel to the fresh processes, and the processes
themselves (forked from a forkserver that has imported pytest and torch once)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from pytest_hpml.compare import confirm


def test_the_runs_own_options_travel_and_the_outer_runs_do_not() -> None:
    option = SimpleNamespace(hpml_max_time=0.25, hpml_min_samples=None, hpml_env="control",
                             hpml_data_root="/data", hpml_download=False, hpml_compare=True,
                             hpml_save_baseline=True, hpml_report="r.md", hpml_confirm=2,
                             hpml_profile="full", hpml_dataset="fashion-mnist", verbose=2)
    assert confirm.passed_options(option) == [
        "--hpml-data-root=/data", "--hpml-dataset=fashion-mnist", "--hpml-env=control",
        "--hpml-max-time=0.25"]


def test_a_forked_rerun_reports_its_exit_code_and_output(tmp_path: Path) -> None:
    (tmp_path / "test_ok.py").write_text("def test_ok():\n    print('ran here')\n")
    (tmp_path / "test_bad.py").write_text("def test_bad():\n    assert 1 == 2\n")
    code, out = confirm.run_forked(["test_ok.py", "-q", "-s", "-p", "no:cacheprovider"],
                                   tmp_path, tmp_path / "ok.log")
    assert code == 0 and "ran here" in out and "1 passed" in out
    code, out = confirm.run_forked(["test_bad.py", "-q", "-p", "no:cacheprovider"], tmp_path,
                                   tmp_path / "bad.log")
    assert code == pytest.ExitCode.TESTS_FAILED and "assert 1 == 2" in out


def test_reruns_that_fail_are_reported_and_confirm_nothing(tmp_path: Path) -> None:
    item = SimpleNamespace(nodeid="test_x.py::test_x", config=SimpleNamespace(
        rootpath=tmp_path, inipath=None, option=SimpleNamespace(),
        pluginmanager=SimpleNamespace(has_plugin=lambda name: False)))

    def crashing(args, cwd, log):
        return 3, "INTERNALERROR> something broke\nlast line"

    records, problems = confirm.rerun(item, "quick", 2, run=crashing)
    assert records == []
    assert problems == ["rerun 1 exited 3: INTERNALERROR> something broke | last line",
                        "rerun 2 exited 3: INTERNALERROR> something broke | last line"]
