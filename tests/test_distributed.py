"""The distributed launcher: results per rank, a rank that raises, a rank that hangs, bad input.

Rank functions live at module level: spawned ranks import them by name.
"""

from __future__ import annotations

import datetime
import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pytest_hpml.distributed import (
    DistributedError,
    DistributedTimeout,
    max_world_size,
    preload_for_ranks,
    run_distributed,
    under_torchrun,
    validate_world_size,
)

REPO_ROOT = Path(__file__).resolve().parents[1]


def _record_pid(pid_dir: str, rank: int) -> None:
    Path(pid_dir, f"rank{rank}.pid").write_text(str(os.getpid()))


def _pids(pid_dir: Path) -> list[int]:
    return [int(p.read_text()) for p in sorted(pid_dir.glob("rank*.pid"))]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def all_reduce_rank(rank: int, world_size: int, length: int) -> dict:
    """Each rank contributes rank + 1; every rank must see the sum 1 + 2 + ... + world_size."""
    summed = torch.full((length,), float(rank + 1))
    dist.all_reduce(summed)
    return {"rank": rank, "world": dist.get_world_size(), "sum": summed,
            "env_rank": int(os.environ["RANK"])}


def raising_rank(rank: int, world_size: int, pid_dir: str) -> None:
    _record_pid(pid_dir, rank)
    if rank == 1:
        raise ValueError("bad shard on rank 1")
    dist.barrier()  # the healthy ranks wait here for a peer that never comes


def hanging_rank(rank: int, world_size: int, pid_dir: str) -> None:
    _record_pid(pid_dir, rank)
    if rank == 0:
        time.sleep(3600)  # a rank stuck outside any collective
    dist.barrier()


def child_process_rank(rank: int, world_size: int, pid_dir: str) -> int | None:
    """A rank that starts processes of its own, as DataLoader workers do: one that finishes,
    and one that would outlive the run if nothing ended it."""
    context = multiprocessing.get_context("fork")
    finishing = context.Process(target=time.sleep, args=(0,))
    finishing.start()
    finishing.join()
    lingering = context.Process(target=time.sleep, args=(3600,), daemon=True)
    lingering.start()
    Path(pid_dir, f"child{rank}.pid").write_text(str(lingering.pid))
    dist.barrier()
    return finishing.exitcode


def module_loaded_rank(rank: int, world_size: int, name: str) -> bool:
    return name in sys.modules


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's init may never reap an orphan)."""
    if not Path("/proc").is_dir():  # no procfs: signal 0 is all there is
        return _alive(pid)
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False  # gone and reaped
    return state not in ("Z", "X")


def dying_rank(rank: int, world_size: int) -> None:
    if rank == 1:
        os._exit(3)  # no exception, no report: like a rank killed by the OOM killer
    dist.barrier()


def test_ranks_return_tensors_in_rank_order():
    results = run_distributed(all_reduce_rank, 2, 5, timeout=120)
    assert [r["rank"] for r in results] == [0, 1]
    assert [r["env_rank"] for r in results] == [0, 1]
    for r in results:
        assert r["world"] == 2
        assert r["sum"].device.type == "cpu"
        torch.testing.assert_close(r["sum"], torch.full((5,), 3.0), rtol=0, atol=0)
    assert multiprocessing.active_children() == []


def test_single_rank_runs():
    (result,) = run_distributed(all_reduce_rank, 1, 2, timeout=120)
    torch.testing.assert_close(result["sum"], torch.ones(2), rtol=0, atol=0)


def test_rank_that_raises_is_reported_with_rank_and_traceback(tmp_path):
    with pytest.raises(DistributedError) as info:
        run_distributed(raising_rank, 2, str(tmp_path), timeout=120)
    error = info.value
    assert error.rank == 1
    message = str(error)
    assert "rank 1 raised ValueError: bad shard on rank 1" in message
    assert error.exception_type == "ValueError"  # what a caller tells kinds of failure by
    assert "raising_rank" in error.rank_traceback  # the rank's own frame, not the launcher's
    pids = _pids(tmp_path)
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids), "a rank survived the failed run"
    assert multiprocessing.active_children() == []


def test_rank_that_hangs_is_killed_at_the_timeout(tmp_path):
    timeout = 10.0
    start = time.monotonic()
    with pytest.raises(DistributedTimeout) as info:
        run_distributed(hanging_rank, 2, str(tmp_path), timeout=timeout)
    elapsed = time.monotonic() - start
    assert 0 in info.value.unfinished
    assert "timed out" in str(info.value)
    assert elapsed < timeout + 15, f"the timeout took {elapsed:.1f} s to end the run"
    pids = _pids(tmp_path)
    assert len(pids) == 2
    assert not any(_alive(pid) for pid in pids), "a hung rank was left behind"
    assert multiprocessing.active_children() == []


def test_rank_that_dies_silently_is_reported():
    # Rank 1 is named as the cause, not rank 0's echo (connection reset). Its exit code is
    # said where torchelastic reaped it before it saw rank 0 fail; which of the two it sees
    # first is a race (under make test's load with a CPU hog, rank 0's failure came first).
    with pytest.raises(DistributedError, match=r"rank 1 died( with exit code 3)? without "
                                               r"reporting a result") as info:
        run_distributed(dying_rank, 2, timeout=120)
    assert info.value.rank == 1
    assert info.value.exception_type is None  # it died without raising
    assert multiprocessing.active_children() == []


@pytest.mark.parametrize("world_size", [0, -1, 2.0])
def test_invalid_world_size_is_refused_before_any_process(world_size):
    with pytest.raises(ValueError, match="world_size"):
        run_distributed(all_reduce_rank, world_size, 1)
    assert multiprocessing.active_children() == []


def test_more_ranks_than_the_machine_can_run_is_refused():
    too_many = max_world_size("gloo") + 1
    with pytest.raises(ValueError, match=r"cannot run \d+ ranks on this machine"):
        run_distributed(all_reduce_rank, too_many, 1)
    assert multiprocessing.active_children() == []


def test_nccl_needs_a_gpu_per_rank():
    if not dist.is_nccl_available():
        pytest.skip("this torch build has no nccl")
    too_many = (torch.cuda.device_count() if torch.cuda.is_available() else 0) + 1
    with pytest.raises(ValueError, match="one GPU per rank"):
        validate_world_size(too_many, "nccl")


def test_nested_function_is_refused_with_a_hint():
    def local_rank_fn(rank, world_size):
        return rank

    with pytest.raises(TypeError, match="module level"):
        run_distributed(local_rank_fn, 2)
    with pytest.raises(TypeError, match="module level"):
        run_distributed(lambda rank, world_size: rank, 2)


def test_a_rank_may_start_processes_and_none_outlives_the_run(tmp_path):
    # A daemonic rank could not: multiprocessing forbids a daemon to have children, and a
    # lab's DataLoader workers would fail to start inside it.
    assert run_distributed(child_process_rank, 2, str(tmp_path)) == [0, 0]
    children = [int(p.read_text()) for p in sorted(tmp_path.glob("child*.pid"))]
    assert len(children) == 2
    deadline = time.monotonic() + 10
    while any(_running(pid) for pid in children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in children if _running(pid)], "a rank's child outlived the run"


PRELOAD_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from pytest_hpml.distributed import preload_for_ranks, run_distributed
from tests.test_distributed import module_loaded_rank

if __name__ == "__main__":
    if {preload!r}:
        preload_for_ranks(["colorsys"])
    assert "colorsys" not in sys.modules  # the server imports it, not this process
    print(run_distributed(module_loaded_rank, 1, "colorsys"))
"""


@pytest.mark.parametrize("preload", [True, False])
def test_ranks_start_with_the_preloaded_modules_imported(tmp_path, preload):
    # A fresh process: this one's forkserver may already run with the imports it started with.
    script = tmp_path / "job.py"
    script.write_text(PRELOAD_SCRIPT.format(root=str(REPO_ROOT), preload=preload))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=180, cwd=str(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().splitlines()[-1] == str([preload])


def test_preload_for_ranks_keeps_what_others_asked_for():
    modules = preload_for_ranks(["colorsys"], start=False)
    # One list per process: a confirmation run earlier in this process may have put its own
    # preloads first, so what counts is that the ranks' modules are in it, not where.
    assert {"torch", "torch.distributed", "colorsys"} <= set(modules)
    # The confirmations' own preloads (pytest, the plugin) are kept beside the ranks' list.
    from pytest_hpml import rerun
    from pytest_hpml.machine import forkserver

    forkserver.add_preload(rerun.preload())
    assert set(modules) <= set(preload_for_ranks([], start=False))


def test_under_torchrun_follows_the_environment(monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    assert not under_torchrun()
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert under_torchrun()


TORCHRUN_SCRIPT = """
import sys
sys.path.insert(0, {root!r})
import os
import time
from pytest_hpml.distributed import run_distributed, under_torchrun
from tests.test_distributed import all_reduce_rank

assert under_torchrun()
results = run_distributed(all_reduce_rank, 2, 4)
for _ in range(2):
    # Again in the same processes, rank 0 at the rendezvous first: the earlier run's addresses
    # left in the job's store must not be taken for this run's.
    if os.environ["RANK"] == "1":
        time.sleep(1)
    results = run_distributed(all_reduce_rank, 2, 4)
# One file per rank: two ranks printing to one pipe may interleave their lines.
with open(f"result-{{os.environ['RANK']}}.txt", "w") as out:
    out.write(f"{{[r['rank'] for r in results]}} {{[r['sum'].tolist() for r in results]}}")
"""


def test_same_code_runs_unchanged_under_torchrun(tmp_path):
    """Under torchrun the launcher joins the existing job instead of spawning ranks, as often
    as it is called."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(TORCHRUN_SCRIPT.format(root=str(REPO_ROOT))))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    completed = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         f"--log-dir={tmp_path / 'torchrun-logs'}", str(script)],
        capture_output=True, text=True, timeout=180, env=env, cwd=str(tmp_path),
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    for rank in (0, 1):
        line = (tmp_path / f"result-{rank}.txt").read_text()
        assert line == "[0, 1] [[3.0, 3.0, 3.0, 3.0], [3.0, 3.0, 3.0, 3.0]]", line


class FakeCuda:
    """torch.cuda's two calls a rank makes to take its GPU."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.current: int | None = None

    def device_count(self) -> int:
        return self.count

    def set_device(self, index: int) -> None:
        self.current = index


def test_each_rank_takes_its_own_gpu_and_gloo_ranks_may_share() -> None:
    from pytest_hpml.distributed.limits import set_rank_gpu

    cuda = FakeCuda(2)
    assert [set_rank_gpu(rank, share=True, cuda=cuda) for rank in range(3)] == [0, 1, 0]
    assert cuda.current == 0
    assert set_rank_gpu(1, share=False, cuda=cuda) == 1 and cuda.current == 1


def test_a_torchrun_rank_past_the_gpus_is_told_what_to_start() -> None:
    from pytest_hpml.distributed.limits import set_rank_gpu

    cuda = FakeCuda(2)
    with pytest.raises(DistributedError, match=r"local rank 3 has no GPU of its own: 2 GPU\(s\) "
                                               r"are visible.*--nproc_per_node 2"):
        set_rank_gpu(3, share=False, cuda=cuda)
    assert cuda.current is None  # nothing was taken
    with pytest.raises(DistributedError, match="sees no GPU"):
        set_rank_gpu(0, share=True, cuda=FakeCuda(0))


def test_a_torchrun_rank_on_cuda_takes_the_gpu_of_its_local_rank(monkeypatch) -> None:
    # Under torchrun (RANK, WORLD_SIZE set), one rank of two on GPU LOCAL_RANK; the process
    # group and the collective are faked: no second process, no GPU.
    from pytest_hpml.distributed import launcher

    cuda = FakeCuda(2)
    monkeypatch.setattr(torch.cuda, "device_count", cuda.device_count)
    monkeypatch.setattr(torch.cuda, "set_device", cuda.set_device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    calls = []
    monkeypatch.setattr(launcher, "_fresh_store_of_the_job", lambda timeout: "the job's store")
    monkeypatch.setattr(dist, "is_initialized", lambda: False)

    def init_process_group(backend, store, rank, world_size, timeout):
        assert (store, rank, world_size) == ("the job's store", 1, 2)
        calls.append(backend)

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    monkeypatch.setattr(dist, "get_rank", lambda: 1)
    monkeypatch.setattr(dist, "all_gather_object", lambda out, obj: out.__setitem__(1, obj))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: calls.append("destroyed"))
    gathered = launcher._run_under_torchrun(lambda rank, size: rank * 10, 2, "nccl", "cuda",
                                            60.0, (), {})
    assert cuda.current == 1 and calls == ["nccl", "destroyed"] and gathered[1] == 10


def test_a_rank_that_died_silently_still_carries_what_its_peers_raised(tmp_path) -> None:
    # Two ranks out of memory: rank 1 killed before it could report, rank 0's MemoryError
    # written. The silent death is blamed first, and rank 0's report travels with it, so a
    # caller can tell an out-of-memory run whatever order the deaths came in.
    import json

    from pytest_hpml.distributed import launcher

    for rank in (0, 1):
        (tmp_path / f"pid-{rank}").write_text(str(10_000 + rank))
    (tmp_path / "error-0.json").write_text(json.dumps({
        "summary": "MemoryError: rank 0 ran out of memory at batch 64 per worker",
        "traceback": "Traceback ...", "type": "MemoryError", "when": 1.0}))
    error = launcher._explain({}, tmp_path, 2)
    assert error.rank == 1 and error.exception_type is None
    assert error.raised == {0: ("MemoryError",
                                "MemoryError: rank 0 ran out of memory at batch 64 per worker")}


def _add_two(rank: int, world_size: int) -> int:
    return rank + 2


def test_a_launch_on_a_port_an_earlier_launch_of_this_process_used_still_starts(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """torch hands the agent this process's rendezvous server through a cache keyed by port that
    keeps a closed server's entry: when the OS gives a launch a port an earlier one used, the
    agent found the closed server and failed with EADDRINUSE (seen under load in make test). The
    OS's reuse is forced here: its first port-0 pick is a port whose closed server is cached."""
    real = dist.TCPStore
    timeout = datetime.timedelta(seconds=30)
    earlier = real("127.0.0.1", 0, is_master=True, wait_for_workers=False, timeout=timeout,
                   multi_tenant=True)
    reused = earlier.port
    del earlier  # closed; its entry stays in torch's cache
    picks = []

    def tcp_store(host, port, *args, **kwargs):
        if port == 0 and not picks:  # the OS picks the earlier launch's port again
            picks.append(reused)
            kwargs["multi_tenant"] = False  # served, but not put in the cache: as torch does
            return real(host, reused, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(dist, "TCPStore", tcp_store)
    assert run_distributed(_add_two, 2, backend="gloo", timeout=60) == [2, 3]
    assert picks == [reused]


def test_a_rank_ended_while_it_wrote_its_error_does_not_hide_the_rank_that_raised(
        tmp_path: Path) -> None:
    """make test under a CPU hog: rank 1 raised, the agent ended rank 0 while rank 0 wrote its
    own error (its peer gone), and the launcher stopped on the empty file with a
    JSONDecodeError. Ranks now write their error whole (a rename); a file that is not a whole
    report is read as no report."""
    import json as json_module

    from pytest_hpml.distributed.launcher import _explain

    for rank in (0, 1):
        (tmp_path / f"pid-{rank}").write_text(str(1000 + rank))
    (tmp_path / "terminated-0").touch()
    (tmp_path / "error-0.json").write_text("")  # cut off mid-write
    (tmp_path / "error-1.json").write_text(json_module.dumps({
        "summary": "ValueError: bad shard on rank 1", "traceback": "Traceback ...",
        "type": "ValueError", "when": 1.0}))
    error = _explain({}, tmp_path, 2)
    assert error.rank == 1 and str(error).startswith("rank 1 raised ValueError: bad shard"), error
