"""pytest under torchrun, as a team runs it: a project of its own (its pytest.ini, its tests)
run by `torchrun ... -m pytest` with 2 CPU ranks, and by two torchrun agents on 127.0.0.1 as
two nodes of 2 ranks each. One report and one baseline, written by rank 0 with every rank's
records; the verdicts of a single process of the same numbers; a test that fails or skips on
one rank ends the same way on every rank, naming it; fresh processes never with the job's
variables."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from hpml_testing import ROOT

from pytest_hpml.distributed import job as jobs

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="torchrun's rendezvous on 127.0.0.1, Linux only here")

PROJECT_TESTS = '''
import json
import os
from pathlib import Path

import pytest

SLOWDOWN = float(os.environ.get("SLOWDOWN", "1"))
RANK = int(os.environ.get("RANK", "0"))


def _snapshot():
    folder = os.environ.get("ENV_DUMPS")
    if folder:
        Path(folder, f"{os.getpid()}.json").write_text(json.dumps(dict(os.environ)))


def test_step(hpml):
    _snapshot()
    hpml.record_timing("step_time", [0.010 * SLOWDOWN * (1 + i / 1000) for i in range(20)])
    hpml.record("count", 42, better=None, exact=True)


def test_per_rank(hpml):
    hpml.record("rank_time", 0.010 * (1 + RANK), unit="s", better="lower", exact=True)
'''

AGREEMENT_TESTS = '''
import os

import pytest

RANK = int(os.environ.get("RANK", "0"))


@pytest.fixture
def gpu_on_this_node():
    if RANK == 1:
        pytest.skip("no GPU on this node")


def test_fails_on_rank_1(hpml):
    hpml.record("x", 1.0, better=None)
    assert RANK != 1, "bad shard on rank 1"


def test_skips_on_rank_1_at_setup(hpml, gpu_on_this_node):
    hpml.record("x", 1.0, better=None)


def test_after(hpml):
    hpml.record("x", 1.0, better=None)
'''

INI = "[pytest]\naddopts = -p no:cacheprovider -p no:benchmark --hpml-max-time=0.05\n"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _environment(**extra: str) -> dict[str, str]:
    env = jobs.fresh_environment()  # this test process may itself run under a launcher
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return {**env, **extra}


def torchrun(cwd: Path, *args: str, nodes: int = 1, timeout: float = 240,
             **extra: str) -> list[subprocess.CompletedProcess]:
    """`torchrun -m pytest ARGS` with 2 ranks per node: one agent (--standalone), or one agent
    per node meeting on 127.0.0.1 (c10d rendezvous, node 0 hosting the store). Returns each
    agent's completed process; only local rank 0's output is shown."""
    # --log-dir: torchrun's error files go there, not to a folder of /tmp of their own.
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
               "--local-ranks-filter=0", f"--log-dir={cwd / 'torchrun-logs'}"]
    if nodes == 1:
        agents = [[*command, "--standalone"]]
    else:
        endpoint = f"127.0.0.1:{_free_port()}"
        agents = [[*command, f"--nnodes={nodes}", f"--node-rank={n}", "--rdzv-backend=c10d",
                   f"--rdzv-endpoint={endpoint}", f"--rdzv-conf=is_host={int(n == 0)}"]
                  for n in range(nodes)]
    started = [subprocess.Popen([*agent, "-m", "pytest", *args], cwd=cwd,
                                env=_environment(**extra), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True) for agent in agents]
    done = []
    for process in started:
        out, _ = process.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(process.args, process.returncode, out, ""))
    return done


def _project(folder: Path, tests: str = PROJECT_TESTS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pytest.ini").write_text(INI)
    (folder / "test_project.py").write_text(tests)
    return folder


def _verdicts(report: Path) -> dict[tuple[str, str], str]:
    document = json.loads(report.read_text())
    # A verdict sits beside the measurement: the record's "verdicts", by metric name.
    return {(r["id"], m["name"]): r.get("verdicts", {}).get(m["name"], {}).get("outcome")
            for r in document["records"] for m in r["metrics"]}


def _single(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=240, env=_environment(**extra))


def test_a_job_gives_one_report_one_baseline_and_a_single_processs_verdicts(tmp_path) -> None:
    """Save, then compare with every time 30 % longer: the job of 2 ranks and a single process
    of the same numbers fail the same metrics; the job's fresh processes (its confirmations)
    ran on both ranks, each without the job's variables."""
    job, single = _project(tmp_path / "job"), _project(tmp_path / "single")
    dumps = tmp_path / "environments"
    dumps.mkdir()
    saved = torchrun(job, "--hpml-save-baseline", "--hpml-baseline-processes=1")[0]
    assert saved.returncode == 0, saved.stdout
    baselines = sorted((job / "baselines").glob("*.json"))
    assert [p.name.rsplit("-", 2)[-2:] for p in baselines] == [["1x2", "quick.json"]], baselines
    stored = {r["id"]: {m["name"]: m for m in r["metrics"]}
              for r in json.loads(baselines[0].read_text())["records"]}
    # One save of the job: one value per metric, not one per rank; where the ranks differ,
    # rank 1's time.
    assert stored["test_project.py::test_step"]["count"]["history"] == [42.0]
    assert stored["test_project.py::test_per_rank"]["rank_time"]["history"] == [0.02]

    compared = torchrun(job, "--hpml-compare", "--hpml-report=compared.json", "--hpml-confirm=1",
                        SLOWDOWN="1.3", ENV_DUMPS=str(dumps))[0]
    assert compared.returncode != 0, compared.stdout

    assert _single(single, "--hpml-save-baseline", "--hpml-baseline-processes=1").returncode == 0
    alone = _single(single, "--hpml-compare", "--hpml-report=compared.json",
                    "--hpml-confirm=1", SLOWDOWN="1.3")
    assert alone.returncode != 0, alone.stdout
    job_verdicts = _verdicts(job / "compared.json")
    single_verdicts = _verdicts(single / "compared.json")
    # The single process has rank 0's numbers where the ranks differ: its own row aside, the
    # verdicts are the same.
    del job_verdicts[("test_project.py::test_per_rank", "rank_time")]
    del single_verdicts[("test_project.py::test_per_rank", "rank_time")]
    assert job_verdicts == single_verdicts
    assert job_verdicts[("test_project.py::test_step", "step_time")] == "regressed"
    assert job_verdicts[("test_project.py::test_step", "count")] == "unchanged"

    # The job's processes and its confirmations' (one fresh job of 2 ranks).
    seen = [json.loads(p.read_text()) for p in dumps.glob("*.json")]
    outer = [e for e in seen if "TORCHELASTIC_RUN_ID" in e]
    fresh = [e for e in seen if "TORCHELASTIC_RUN_ID" not in e]
    assert sorted(e["RANK"] for e in outer) == ["0", "1"]
    assert sorted(e["RANK"] for e in fresh) == ["0", "1"], "the fresh job runs on every rank"
    assert {e["MASTER_PORT"] for e in fresh}.isdisjoint({e["MASTER_PORT"] for e in outer})
    for environment in fresh:
        assert environment["HPML_FRESH_JOB"] == "1"
        assert not [k for k in environment if k.startswith("TORCHELASTIC_")
                    and k != "TORCHELASTIC_USE_AGENT_STORE"]


def test_a_rank_that_fails_or_skips_ends_the_test_on_every_rank(tmp_path) -> None:
    project = _project(tmp_path, AGREEMENT_TESTS)
    done = torchrun(project, "-rA", "--hpml-report=report.json")[0]
    out = done.stdout
    assert done.returncode != 0
    # On rank 0, where both tests passed by themselves: one failed, one skipped, naming rank 1;
    # and the session went on.
    assert "1 failed, 1 passed, 1 skipped" in out, out
    assert ("the call of this test did not pass on every rank of the job: rank 1 failed "
            "(AssertionError: bad shard on rank 1") in out
    assert "rank 1 skipped (no GPU on this node), where rank(s) 0 passed" in out
    assert "PASSED test_project.py::test_after" in out
    records = json.loads((project / "report.json").read_text())["records"]
    assert [r["id"] for r in records] == ["test_project.py::test_fails_on_rank_1",
                                          "test_project.py::test_after"]


def test_two_nodes_on_loopback_save_compare_and_fail_on_a_slowdown(tmp_path) -> None:
    """Two torchrun agents (--nnodes=2, c10d rendezvous on 127.0.0.1, 2 ranks each): a baseline
    of its own topology, one report, the slowdown caught."""
    project = _project(tmp_path)
    saved = torchrun(project, "--hpml-save-baseline", "--hpml-baseline-processes=1",
                     "--hpml-report=saved.md", nodes=2)
    assert [a.returncode for a in saved] == [0, 0], saved[0].stdout + saved[1].stdout
    (baseline,) = (project / "baselines").glob("*.json")
    assert baseline.name.endswith("-2x2-quick.json"), baseline.name
    assert "hpml: rank 2 of a 4-rank job on 2 node(s) (torchrun)" in saved[1].stdout
    assert "hpml report" not in saved[1].stdout  # rank 2 measures; rank 0 writes
    compared = torchrun(project, "--hpml-compare", "--hpml-confirm=0", "--hpml-report=r.json",
                        nodes=2, SLOWDOWN="1.3")
    assert compared[0].returncode != 0
    verdicts = _verdicts(project / "r.json")
    assert verdicts[("test_project.py::test_step", "step_time")] == "regressed"
    assert verdicts[("test_project.py::test_per_rank", "rank_time")] == "unchanged"
    fingerprint = json.loads(baseline.read_text())["fingerprint"]
    assert (fingerprint["nodes"], fingerprint["ranks_per_node"]) == (2, 2)


def test_ranks_that_collected_other_tests_stop_before_any_test(tmp_path) -> None:
    project = _project(tmp_path, AGREEMENT_TESTS)
    (project / "conftest.py").write_text(
        "import os\n"
        "def pytest_collection_modifyitems(items):\n"
        "    if os.environ.get('RANK') == '1':\n"
        "        items.pop()\n")
    done = torchrun(project, "--hpml-report=report.json")[0]
    assert "rank 1 of the job collected other tests than rank 0 (2 and 3 tests; at #3 rank 0 " \
           "has test_project.py::test_after, rank 1 nothing)" in done.stdout, done.stdout
    assert not (project / "report.json").exists()


def test_no_fresh_process_gets_the_jobs_variables_outside_a_job_either(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """A single process with a job's variables left in its environment (a job of one, a
    launcher's leftovers): the fresh processes of its save start without them."""
    _project(pytester.path)
    dumps = pytester.path / "environments"
    dumps.mkdir()
    leftovers = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "10.9.9.9",
                 "MASTER_PORT": "1234", "TORCHELASTIC_RUN_ID": "r1", "SLURM_PROCID": "0",
                 "SLURM_STEP_ID": "3", "SLURM_STEP_NUM_TASKS": "1"}
    for name, value in {**leftovers, "ENV_DUMPS": str(dumps)}.items():
        monkeypatch.setenv(name, value)
    # No budget: the save's fresh process runs whatever the run's own time was.
    result = pytester.runpytest_subprocess("--hpml-save-baseline", "--hpml-baseline-processes=2",
                                           "--hpml-save-budget=all", "-k", "test_step")
    assert result.ret == 0, result.stdout.str()
    seen = [json.loads(p.read_text()) for p in dumps.glob("*.json")]
    assert len(seen) == 2  # the run's own process and one fresh process
    outer = [e for e in seen if "RANK" in e]
    fresh = [e for e in seen if "RANK" not in e]
    assert len(outer) == len(fresh) == 1
    assert not set(leftovers) & set(fresh[0]), "a fresh process inherited a job's variable"
