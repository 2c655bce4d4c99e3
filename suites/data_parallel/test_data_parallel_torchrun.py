"""The lab's rank function runs unchanged under torchrun: one process per rank started by
torchrun (here 2 CPU ranks on this node; --nnodes and a rendezvous endpoint make it many nodes),
the launcher joining the job instead of starting ranks. Both ranks end with the same model and
all-reduce the model's gradients, as under the launcher."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_hpml.distributed import current_job, fresh_environment

pytestmark = pytest.mark.data_parallel

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_train_rank_runs_unchanged_under_torchrun(tmp_path):
    if current_job() is not None:
        pytest.skip("this session already runs under a launcher: its ranks are the torchrun run")
    env = fresh_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         f"--log-dir={tmp_path / 'torchrun-logs'}",
         "-m", "suites.data_parallel.ranks", "--width", "4", "--images", "64", "--batch", "16",
         "--epochs", "1", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=240, env=env, cwd=str(tmp_path))
    assert completed.returncode == 0, completed.stdout + completed.stderr
    summaries = [json.loads((tmp_path / f"rank-{rank}.json").read_text()) for rank in (0, 1)]
    for rank, summary in enumerate(summaries):
        assert summary["rank"] == rank and summary["world_size"] == 2
        # Every rank gathered both ranks' results: the same model on both.
        assert len(set(summary["parameters_digests"])) == 1
        # Width 4: 44,622 fp32 parameters, all-reduced once per step.
        assert summary["gradient_bytes_per_step"] == [4 * 44_622] * 2
    assert summaries[0]["parameters_digests"] == summaries[1]["parameters_digests"]
