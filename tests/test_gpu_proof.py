"""tools/gpu_proof.py, the script the first GPU session runs: here, without a GPU, every stage
is skipped in seconds and says why; its stage selection, and how it judges a pytest stage from
its exit status and junit XML (a fake pytest stage, run for real)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
from hpml_testing import ROOT, without_gpu

TOOL = ROOT / "tools" / "gpu_proof.py"


@cache
def _tool():
    """tools/gpu_proof.py as a module (tools/ is no package)."""
    spec = importlib.util.spec_from_file_location("gpu_proof", TOOL)
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpu_proof"] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@without_gpu
def test_every_stage_skips_here_and_says_why(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(TOOL), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    stages = [stage.name for stage in _tool().STAGES]
    assert stages[:2] == ["install", "smoke"] and len(stages) == 12
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert [o["stage"] for o in summary] == stages
    for outcome in summary:
        assert outcome["outcome"] == "skipped", outcome
        assert outcome["why"].startswith("no CUDA GPU: torch "), outcome
        assert json.loads((tmp_path / outcome["stage"] / "outcome.json").read_text()) == outcome
    table = (tmp_path / "summary.md").read_text()
    assert "| full-int8_gemm | skipped |" in table and "0 passed, 12 skipped, 0 failed" in table
    assert "gpu_proof: smoke: skipped (0 s): no CUDA GPU" in out.stdout
    # A CI job that must have a GPU fails instead.
    required = subprocess.run([sys.executable, str(TOOL), "--out", str(tmp_path / "again"),
                               "--stages", "smoke", "--require-gpu"], capture_output=True,
                              text=True, timeout=300)
    assert required.returncode == 1


def test_stages_are_chosen_by_name_or_prefix() -> None:
    tool = _tool()
    assert [s.name for s in tool.selected("install,quick")] == [
        "install", *(f"quick-{lab}" for lab in tool.LABS)]
    assert [s.name for s in tool.selected("full-int8")] == ["full-int8_gemm"]
    with pytest.raises(SystemExit, match="no stage called gpu; the stages: install, smoke"):
        tool.selected("smoke,gpu")
    # The default --minutes lets every stage have its budget.
    assert sum(s.budget for s in tool.STAGES) <= tool.DEFAULT_MINUTES * 60


FAKE_STAGE = '''
import pytest


def test_ok():
    pass


@pytest.mark.skip(reason="needs what this machine lacks")
def test_skipped():
    pass


def test_slow():
    import time
    time.sleep({sleep})
'''


@pytest.mark.parametrize(("sleep", "budget", "outcome", "why"), [
    (0, 300, "passed", ""),
    (60, 5, "failed", "killed at its budget of 5 s"),
])
def test_a_pytest_stage_is_judged_by_its_junit_xml_and_its_budget(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sleep, budget, outcome, why) -> None:
    tool = _tool()
    (tmp_path / "test_fake.py").write_text(FAKE_STAGE.format(sleep=sleep))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.setattr(tool, "ROOT", tmp_path)  # the stage runs in this project
    stage = tool.Stage("fake", budget, "a fake stage", ("test_fake.py",))
    folder = tmp_path / "out"
    folder.mkdir()
    result = tool.run_pytest_stage(stage, folder, budget)
    assert (result.outcome, result.why) == (outcome, why)
    if outcome == "passed":
        assert result.tests == {"passed": 2, "skipped": 1, "failed": 0}
        assert (folder / "report.md").exists() and "test_fake.py" in (
            folder / "output.txt").read_text()


@without_gpu
def test_the_smoke_checks_skip_here_with_the_reason(tmp_path: Path) -> None:
    # The smoke stage's checks are collected and skipped as a user's GPU tests are.
    out = subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "tools" / "gpu_smoke.py"),
                          "-q", "-rs", "-p", "no:cacheprovider", "--hpml-profile=quick",
                          f"--rootdir={ROOT}", "-c", str(ROOT / "tox.ini")],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "13 skipped" in out.stdout
    assert out.stdout.count("needs a CUDA GPU: none was found on this machine") >= 1


CI_SUITE = '''
import time
from pathlib import Path

import pytest


# A sleep does not follow the machine's compute pace: without the yardstick it is judged as
# measured. With it, make test's load (two xdist workers and a CPU hog on two cores) once
# timed the pace loop 6.7x slower than at the save, and the rule that holds back a metric
# whose history cannot yet say whether it follows the pace said the 3x slower sleep could not
# be judged (a blind spot), which is right for the plugin and not what this test is about.
@pytest.mark.hpml(yardstick=False)
def test_wait(hpml):
    # 3x slower once the file `slower` is there (well beyond a sleep's noise under load). Both
    # sleeps 10 ms or more: beside make test's other worker and a CPU hog a 2 ms sleep read
    # 2.8 ms in one process against 2.1 ms in the others, a 10 ms sleep about 10.4 ms.
    hpml.time(time.sleep, 0.03 if Path("slower").exists() else 0.01, name="wait")
'''


def test_the_ci_stage_saves_then_fails_a_compare_only_on_a_change(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A user's suite saved and compared unchanged: the stage passes; the same suite made slower
    # between its save and its compare: the stage fails, saying so.
    tool = _tool()
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_wait.py").write_text(CI_SUITE)
    monkeypatch.setattr(tool, "ROOT", tmp_path)
    monkeypatch.chdir(tmp_path)
    stage = tool.Stage("ci-fake", 300, "a fake CI stage", ("test_wait.py",), compares=1)
    result = tool.run_ci_stage(stage, tmp_path / "same", 300)
    assert result.outcome == "passed", result.why
    assert result.why.startswith("save: exit 0 in ") and "compare-1: exit 0 in " in result.why
    assert (tmp_path / "same" / "compare-1.md").exists()
    assert tool.verdicts(tmp_path / "same" / "compare-1.csv") in (
        {"unchanged": 1}, {"improved": 1})

    run_logged = tool.run_logged

    def then_slower(command, log, timeout):
        done = run_logged(command, log, timeout)
        (tmp_path / "slower").touch()  # the code changes after the save
        return done

    monkeypatch.setattr(tool, "run_logged", then_slower)
    slower = tool.run_ci_stage(stage, tmp_path / "changed", 300)
    assert slower.outcome == "failed" and "compare-1: exit 1 in " in slower.why, slower.why
    assert "(1 regressed)" in slower.why
