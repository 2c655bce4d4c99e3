"""The job this process is a rank of, read from its environment (no torch, no pytest: the
plugin's hook modules ask it before anything heavy is imported).

    torchrun, torch's elastic agent   RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
    (or any env:// launcher)          GROUP_RANK / GROUP_WORLD_SIZE (the node and the nodes),
                                      MASTER_ADDR / MASTER_PORT (the job's store)
    srun (a SLURM job step)           SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID,
                                      SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE, the step's node
                                      list: mapped to the names above (``torch_variables``),
                                      so that torch.distributed's env:// rendezvous works as
                                      under torchrun

srun's own variables count only inside a job step with more than one task
(SLURM_STEP_NUM_TASKS): an sbatch script's batch step has SLURM_PROCID=0 and SLURM_NTASKS set
too, and a pytest started there directly is one process, not rank 0 of a job whose other
ranks never come. torchrun's variables win where both are set (srun starting torchrun).

A fresh process (a comparison's confirmation, a save's further processes) is never started
with the job's variables: it would take itself for a rank of the job and wait for peers that
never come, or join the job's store ("Gloo connectFullMesh failed"). ``fresh_environment``
is the environment it gets.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

#: What torch's launchers tell a rank: who it is, where the job's store is.
TORCH_JOB_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                       "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_NAME", "ROLE_WORLD_SIZE",
                       "MASTER_ADDR", "MASTER_PORT")
#: What srun tells each task of a step about the step (the job's allocation, SLURM_JOB_ID,
#: SLURM_CPUS_ON_NODE and the like, stays: it describes the machine, not a rank).
SLURM_TASK_VARIABLES = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS",
                        "SLURM_NPROCS", "SLURM_NNODES", "SLURM_JOB_NUM_NODES",
                        "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_GTIDS",
                        "SLURM_TASK_PID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
                        "SLURM_PRIO_PROCESS", "SLURM_LAUNCH_NODE_IPADDR")
#: Whole families: the elastic agent's (its run id, its store, restarts, error files), a
#: step's (SLURM_STEP_ID, SLURM_STEP_NUM_TASKS ...), srun's connection back to its launcher.
JOB_PREFIXES = ("TORCHELASTIC_", "SLURM_STEP_", "SLURM_SRUN_")
#: Set by the plugin in the ranks of a fresh job of its own (compare.confirm on every rank).
FRESH_JOB = "HPML_FRESH_JOB"


@dataclass(frozen=True)
class Job:
    """One rank's view of its job. Nodes are the launcher's (torchrun's agents, srun's
    nodes); ranks are numbered node by node."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nodes: int
    master_addr: str
    master_port: int
    launcher: str  # "torchrun", "srun" or "env" (another launcher of the env:// kind)

    @property
    def topology(self) -> str:
        """'2x2': nodes x ranks per node."""
        return f"{self.nodes}x{self.local_world_size}"


def _int(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    text = environ.get(name)
    if text is None or text == "":
        if default is None:
            raise ValueError(f"{name} is not set")
        return default
    try:
        return int(text)
    except ValueError:
        raise ValueError(f"{name}={text!r} is not an integer") from None


def _is_srun_step(environ: Mapping[str, str]) -> bool:
    return "SLURM_PROCID" in environ and "SLURM_STEP_ID" in environ and \
        _int(environ, "SLURM_STEP_NUM_TASKS", 1) > 1


def tasks_on_node(tasks_per_node: str, node: int) -> int:
    """Tasks on node ``node`` from SLURM's compressed list: '2(x3),1' is 2, 2, 2, 1."""
    counts: list[int] = []
    for part in tasks_per_node.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if not match:
            raise ValueError(f"cannot read SLURM's tasks per node {tasks_per_node!r}")
        counts += [int(match.group(1))] * int(match.group(2) or 1)
    if not 0 <= node < len(counts):
        raise ValueError(f"node {node} is not in SLURM's tasks per node {tasks_per_node!r}")
    return counts[node]


def first_host(nodelist: str) -> str:
    """The first host of a SLURM host list: 'gpu[07-09,12],cpu3' is 'gpu07'."""
    depth, end = 0, len(nodelist)
    for i, char in enumerate(nodelist):
        depth += {"[": 1, "]": -1}.get(char, 0)
        if char == "," and depth == 0:
            end = i
            break
    first = nodelist[:end].strip()
    match = re.fullmatch(r"([^\[]*)\[([^\]]*)\](.*)", first)
    if match:
        prefix, ranges, suffix = match.groups()
        first = prefix + re.split(r"[,-]", ranges)[0] + suffix
    if not first:
        raise ValueError(f"cannot read a host from SLURM's node list {nodelist!r}")
    return first


#: Where the store of an srun job listens when MASTER_PORT is not given: a port derived from the
#: job and step ids, so that two jobs sharing a node do not pick the same one.
SLURM_PORT_BASE, SLURM_PORT_SPAN = 20000, 20000


def torch_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """torch's rank variables for a task of an srun step (empty outside one). MASTER_ADDR and
    MASTER_PORT given in the environment win (an sbatch script may choose them)."""
    if "RANK" in environ or not _is_srun_step(environ):
        return {}
    node = _int(environ, "SLURM_NODEID", 0)
    per_node = environ.get("SLURM_STEP_TASKS_PER_NODE") or environ.get(
        "SLURM_TASKS_PER_NODE") or ""
    nodelist = environ.get("SLURM_STEP_NODELIST") or environ.get("SLURM_JOB_NODELIST") or ""
    job_id = _int(environ, "SLURM_JOB_ID", 0)
    step_id = _int(environ, "SLURM_STEP_ID", 0)
    port = SLURM_PORT_BASE + (job_id * 64 + step_id) % SLURM_PORT_SPAN
    return {
        "RANK": str(_int(environ, "SLURM_PROCID")),
        "WORLD_SIZE": str(_int(environ, "SLURM_STEP_NUM_TASKS")),
        "LOCAL_RANK": str(_int(environ, "SLURM_LOCALID", 0)),
        "LOCAL_WORLD_SIZE": str(tasks_on_node(per_node, node) if per_node else 1),
        "GROUP_RANK": str(node),
        "GROUP_WORLD_SIZE": str(_int(environ, "SLURM_STEP_NUM_NODES",
                                     _int(environ, "SLURM_NNODES", 1))),
        "MASTER_ADDR": environ.get("MASTER_ADDR") or (first_host(nodelist) if nodelist
                                                       else "127.0.0.1"),
        "MASTER_PORT": environ.get("MASTER_PORT") or str(port),
    }


def current_job(environ: Mapping[str, str] | None = None) -> Job | None:
    """This process's job, or None when it is not a rank of one. Raises ValueError naming the
    variable when the launcher's variables cannot be read."""
    environ = os.environ if environ is None else environ
    mapped = torch_variables(environ)
    launcher = "srun" if mapped else ("torchrun" if "TORCHELASTIC_RUN_ID" in environ else "env")
    env = {**environ, **mapped}
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    rank, world_size = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local_world_size = _int(env, "LOCAL_WORLD_SIZE", world_size)
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} is not a rank of a job of WORLD_SIZE={world_size}")
    return Job(rank=rank, world_size=world_size, local_rank=_int(env, "LOCAL_RANK", 0),
               local_world_size=local_world_size,
               node_rank=_int(env, "GROUP_RANK", rank // max(1, local_world_size)),
               nodes=_int(env, "GROUP_WORLD_SIZE", max(1, world_size // max(1,
                                                                            local_world_size))),
               master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
               master_port=_int(env, "MASTER_PORT", 0), launcher=launcher)


def is_secondary_rank(environ: Mapping[str, str] | None = None) -> bool:
    """True in a non-zero rank of a torchrun or srun job of several ranks: it measures and
    sends its records to rank 0, which alone judges and writes reports, exports and
    baselines. False in rank 0, in a job of one, and outside any job."""
    try:
        job = current_job(environ)
    except ValueError:
        return False  # unreadable variables: the plugin's configure says so (pytest_hpml.ranks)
    return job is not None and job.world_size > 1 and job.rank != 0


def is_job_variable(name: str) -> bool:
    return name in TORCH_JOB_VARIABLES or name in SLURM_TASK_VARIABLES or \
        name == FRESH_JOB or name.startswith(JOB_PREFIXES)


def fresh_environment(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment a fresh process gets: this one's without the job's rank variables
    (torch's launchers', the elastic agent's, srun's per task and step). Outside a job the
    same holds: a stray RANK would make the fresh process wait for a job that is not there."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if not is_job_variable(k)}


def fresh_job_variables(job: Job, address: str, port: int) -> dict[str, str]:
    """A rank's variables in a fresh job shaped as ``job`` (same ranks, same nodes), whose store
    listens at address:port: every rank is a client of it, as of an elastic agent's store
    (torch's env:// rendezvous included)."""
    return {"RANK": str(job.rank), "WORLD_SIZE": str(job.world_size),
            "LOCAL_RANK": str(job.local_rank), "LOCAL_WORLD_SIZE": str(job.local_world_size),
            "GROUP_RANK": str(job.node_rank), "GROUP_WORLD_SIZE": str(job.nodes),
            "MASTER_ADDR": address, "MASTER_PORT": str(port),
            "TORCHELASTIC_USE_AGENT_STORE": "True", FRESH_JOB: "1"}
