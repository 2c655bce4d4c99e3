"""A process's job as its launcher describes it (torchrun, srun), the environment a fresh
process gets without it, what rank 0 makes of its ranks' records and outcomes, and the
baseline key of a job's topology. No process is started here: see test_ranks.py."""

from __future__ import annotations

import pytest

from pytest_hpml import rerun
from pytest_hpml.distributed import job as jobs
from pytest_hpml.distributed.merge import merge_ranks
from pytest_hpml.machine import fingerprint as fingerprints
from pytest_hpml.machine.fingerprint import machine_key
from pytest_hpml.ranks import agreement, collection_difference
from pytest_hpml.results import Metric, Record

TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
            "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.5",
            "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "abc",
            "TORCHELASTIC_USE_AGENT_STORE": "True"}
#: What srun gives the 4th task of a step of 2 nodes x 2 tasks (sbatch --nodes=2
#: --ntasks-per-node=2, then srun python -m pytest).
SRUN = {"SLURM_JOB_ID": "81234", "SLURM_STEP_ID": "0", "SLURM_PROCID": "3",
        "SLURM_LOCALID": "1", "SLURM_NODEID": "1", "SLURM_STEP_NUM_TASKS": "4",
        "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURM_STEP_NODELIST": "gpu[07-08]", "SLURM_NTASKS": "4", "SLURM_CPUS_ON_NODE": "32"}


def test_a_torchrun_rank_knows_its_rank_node_and_store() -> None:
    job = jobs.current_job(TORCHRUN)
    assert job == jobs.Job(rank=3, world_size=4, local_rank=1, local_world_size=2, node_rank=1,
                           nodes=2, master_addr="10.0.0.5", master_port=29400,
                           launcher="torchrun")
    assert job.topology == "2x2"
    assert jobs.is_secondary_rank(TORCHRUN)
    assert not jobs.is_secondary_rank({**TORCHRUN, "RANK": "0"})
    assert not jobs.is_secondary_rank({**TORCHRUN, "RANK": "0", "WORLD_SIZE": "1"})
    assert jobs.current_job({"PATH": "/usr/bin"}) is None


def test_an_srun_task_is_mapped_to_torchs_variables() -> None:
    assert jobs.torch_variables(SRUN) == {
        "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
        "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "MASTER_ADDR": "gpu07",
        "MASTER_PORT": str(jobs.SLURM_PORT_BASE + (81234 * 64) % jobs.SLURM_PORT_SPAN)}
    job = jobs.current_job(SRUN)
    assert (job.rank, job.world_size, job.node_rank, job.nodes, job.launcher) == (
        3, 4, 1, 2, "srun")
    # A MASTER_ADDR and MASTER_PORT the sbatch script exports win.
    chosen = jobs.torch_variables({**SRUN, "MASTER_ADDR": "login1", "MASTER_PORT": "12345"})
    assert (chosen["MASTER_ADDR"], chosen["MASTER_PORT"]) == ("login1", "12345")


def test_an_sbatch_batch_step_and_a_one_task_step_are_no_job() -> None:
    # The batch script itself has SLURM_PROCID=0 and SLURM_NTASKS=4, no step of its own: a
    # pytest started there is one process, not rank 0 of a job whose ranks never come.
    batch = {k: v for k, v in SRUN.items() if not k.startswith("SLURM_STEP_")}
    assert jobs.current_job({**batch, "SLURM_PROCID": "0"}) is None
    assert jobs.current_job({**SRUN, "SLURM_STEP_NUM_TASKS": "1"}) is None
    # srun starting torchrun: torchrun's variables win.
    assert jobs.current_job({**SRUN, **TORCHRUN}).launcher == "torchrun"


@pytest.mark.parametrize("listed, first", [("gpu[07-09,12],cpu3", "gpu07"), ("a-1,b", "a-1"),
                                           ("n[3,5-7]x", "n3x"), ("node17", "node17")])
def test_the_first_host_of_a_slurm_node_list(listed: str, first: str) -> None:
    assert jobs.first_host(listed) == first


def test_tasks_per_node_reads_slurms_compressed_list() -> None:
    assert [jobs.tasks_on_node("2(x3),1", n) for n in range(4)] == [2, 2, 2, 1]
    with pytest.raises(ValueError, match="node 4 is not in"):
        jobs.tasks_on_node("2(x3),1", 4)


def test_unreadable_variables_are_named() -> None:
    with pytest.raises(ValueError, match=r"RANK='x' is not an integer"):
        jobs.current_job({**TORCHRUN, "RANK": "x"})
    with pytest.raises(ValueError, match="RANK=7 is not a rank of a job of WORLD_SIZE=4"):
        jobs.current_job({**TORCHRUN, "RANK": "7"})


def test_a_fresh_process_gets_none_of_the_jobs_variables(monkeypatch) -> None:
    environ = {**TORCHRUN, **SRUN, "PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "1",
               "PYTEST_ADDOPTS": "-x", "HPML_FRESH_JOB": "1", "SLURM_STEP_GPUS": "1"}
    fresh = jobs.fresh_environment(environ)
    assert fresh == {"PATH": "/usr/bin", "CUDA_VISIBLE_DEVICES": "1", "PYTEST_ADDOPTS": "-x",
                     "SLURM_JOB_ID": "81234", "SLURM_CPUS_ON_NODE": "32"}
    assert jobs.current_job(fresh) is None
    # The confirmations' and the saves' processes start with it.
    monkeypatch.setattr("os.environ", environ)
    assert rerun.environment() == fresh


def test_a_fresh_job_has_the_shape_of_the_job_and_a_store_of_its_own() -> None:
    job = jobs.current_job(TORCHRUN)
    fresh = {**jobs.fresh_environment(TORCHRUN),
             **jobs.fresh_job_variables(job, "10.0.0.9", 40001)}
    again = jobs.current_job(fresh)
    assert (again.rank, again.world_size, again.local_rank, again.node_rank, again.nodes) == (
        3, 4, 1, 1, 2)
    assert (again.master_addr, again.master_port) == ("10.0.0.9", 40001)
    assert "TORCHELASTIC_RUN_ID" not in fresh and fresh["HPML_FRESH_JOB"] == "1"


# -- the baseline key names the topology ---------------------------------------------------------

CPU = {"gpu": None, "cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu_cores": 2}
GPU = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8}


def test_a_single_process_keeps_its_key_and_a_job_adds_its_topology(tmp_path,
                                                                    monkeypatch) -> None:
    assert machine_key(CPU) == "intel-xeon-platinum-8481c-x2cores"  # as before this issue
    assert fingerprints.topology({"PATH": "/bin"}) == {}
    assert fingerprints.topology({**TORCHRUN, "WORLD_SIZE": "1", "RANK": "0",
                                  "LOCAL_WORLD_SIZE": "1", "GROUP_WORLD_SIZE": "1"}) == {}
    monkeypatch.setattr(fingerprints, "INFINIBAND", str(tmp_path / "none"))
    two_nodes = fingerprints.topology(TORCHRUN)
    assert two_nodes == {"nodes": 2, "ranks_per_node": 2, "interconnect": None}
    one_node = fingerprints.topology({**TORCHRUN, "GROUP_WORLD_SIZE": "1", "WORLD_SIZE": "2",
                                      "RANK": "1", "GROUP_RANK": "0"})
    keys = {machine_key({**CPU, **two_nodes}), machine_key({**CPU, **one_node}),
            machine_key(CPU)}
    assert keys == {"intel-xeon-platinum-8481c-x2cores-2x2",
                    "intel-xeon-platinum-8481c-x2cores-1x2", "intel-xeon-platinum-8481c-x2cores"}
    (tmp_path / "ib" / "mlx5_0").mkdir(parents=True)
    assert fingerprints.interconnect(str(tmp_path / "ib")) == "ib"
    assert machine_key({**GPU, "nodes": 2, "ranks_per_node": 8, "interconnect": "ib"}) == \
        "nvidia-h100-80gb-hbm3-x8-2x8-ib"


# -- what rank 0 makes of its ranks ---------------------------------------------------------------

def _row(rank_time: float, count: float = 42, extra: str | None = None) -> list[Record]:
    row = Record(id="t.py::test_a", experiment="t.py::test_a", metrics=[
        Metric("step_time", rank_time, "s", "lower", samples=[rank_time] * 3),
        Metric("rate", 1 / rank_time, "1/s", "higher"),
        Metric("count", count, "", None, exact=True),
        Metric("width", 8, "", None, kind="setting")])
    rows = [row]
    if extra:
        rows.append(Record(id=extra, experiment="t.py::test_a"))
    return rows


def test_ranks_that_agree_give_a_single_processs_records() -> None:
    merged = merge_ranks({0: _row(0.01), 1: _row(0.01), 2: _row(0.01)})
    assert [r.to_dict() for r in merged] == [r.to_dict() for r in _row(0.01)]


def test_where_ranks_differ_the_worst_rank_is_the_jobs_value() -> None:
    merged = merge_ranks({0: _row(0.01), 1: _row(0.03, count=41), 2: _row(0.02,
                                                                           extra="only-2")})
    assert [r.id for r in merged] == ["t.py::test_a", "only-2"]
    metrics = {m.name: m for m in merged[0].metrics}
    assert metrics["step_time"].value == 0.03 and metrics["step_time"].samples == [0.03] * 3
    assert metrics["rate"].value == pytest.approx(1 / 0.03)  # the lowest rate
    assert metrics["count"].value == 42  # no direction: the lowest rank's
    assert "the highest of 3 ranks" in metrics["step_time"].note
    assert metrics["width"].note is None  # the same everywhere: nothing to say


def test_the_job_agrees_or_names_the_ranks_that_did_not_pass() -> None:
    passed = {"outcome": "passed", "why": ""}
    assert agreement({0: passed, 1: passed}, "call") == {"outcome": None, "message": None}
    failed = {"outcome": "failed", "why": "AssertionError: boom"}
    assert agreement({0: failed, 1: failed}, "call")["outcome"] is None  # each has its own
    decided = agreement({0: passed, 1: failed, 2: passed}, "call")
    assert decided["outcome"] == "failed"
    assert "rank 1 failed (AssertionError: boom), where rank(s) 0, 2 passed" in \
        decided["message"]
    skipped = agreement({0: passed, 1: {"outcome": "skipped", "why": "no GPU on this node"}},
                        "setup")
    assert skipped["outcome"] == "skipped" and "rank 1 skipped (no GPU on this node)" in \
        skipped["message"]


def test_ranks_that_collected_other_tests_are_named_with_the_first_difference() -> None:
    same = {"ids": ["a", "b", "c"], "errors": 0}
    assert collection_difference({0: same, 1: same}) is None
    problem = collection_difference({0: same, 1: same, 2: {"ids": ["a", "c"], "errors": 1}})
    assert problem.startswith("rank 2 of the job collected other tests than rank 0 (2 and 3 "
                              "tests; at #2 rank 0 has b, rank 2 c; rank 2 had 1 error(s) "
                              "during collection)")
    assert "at #3 rank 0 has c, rank 1 nothing" in collection_difference(
        {0: same, 1: {"ids": ["a", "b"], "errors": 0}})
