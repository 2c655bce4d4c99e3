"""Run a function on N ranks with torch.distributed and bring each rank's result back.

    results = run_distributed(train_rank, 4, data, config)   # [result of rank 0, ..., rank 3]

Each rank is a fresh process (forked from a clean forkserver, or spawned; never forked from the
caller, so CUDA can be used in it) that runs
``fn(rank, world_size, *args, **kwargs)`` inside an initialized default process group (gloo on
CPU, nccl with one GPU per rank when there are enough GPUs). The rendezvous is a TCPStore that the
calling process opens on 127.0.0.1 with a port chosen by the OS and holds for the whole run, so
two pytest-xdist workers launching at the same moment can never race for one port.

A rank that raises ends the run: every other rank is terminated and the test sees a
DistributedError naming the rank, with the rank's own traceback. A run that does not finish within
``timeout`` seconds (a deadlocked collective, a rank waiting for a peer that died) kills every rank
and raises DistributedTimeout naming the ranks that had not finished. Ranks live in their own
process group and watch their parent, so nothing they started survives the run.

Lab code is written against torch.distributed only (``dist.all_reduce`` ...), never against this
module, so the same function runs unchanged under torchrun: when the current process already is a
torchrun rank (RANK and WORLD_SIZE in the environment), run_distributed runs ``fn`` in this process
on the existing group and gathers every rank's result with ``all_gather_object``.
"""

from __future__ import annotations

import datetime
import io
import multiprocessing.connection as mp_connection
import os
import pickle
import queue
import signal
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

__all__ = [
    "DistributedError",
    "DistributedTimeout",
    "choose_backend",
    "max_world_size",
    "rank_device",
    "run_distributed",
    "under_torchrun",
    "validate_world_size",
]

DEFAULT_TIMEOUT = 180.0
BACKENDS = ("gloo", "nccl")
# Oversubscribing CPU cores with gloo ranks still works (they just take turns), but far beyond the
# core count it only measures the scheduler; refuse before starting anything.
GLOO_RANKS_PER_CORE = 4
# How long a terminated rank gets to exit before it is killed outright.
TERMINATE_GRACE = 2.0
# How long the error path waits for a rank that died without a word to show its closed pipe.
SILENT_DEATH_WAIT = 1.0
# How often the parent looks for dead ranks while waiting for results.
POLL_INTERVAL = 0.05
# Collectives inside the ranks time out a little after the run itself, so that a hang is reported
# by the parent as a hang (naming the stuck ranks), not as a timeout error of some waiting peer.
COLLECTIVE_TIMEOUT_MARGIN = 30.0


class DistributedError(RuntimeError):
    """A rank failed: it raised, or it died without reporting (killed, crashed, exit code)."""

    def __init__(self, message: str, rank: int | None = None, rank_traceback: str = "",
                 others: list[str] | None = None) -> None:
        super().__init__(message)
        self.rank = rank
        self.rank_traceback = rank_traceback
        self.others = others or []


class DistributedTimeout(DistributedError):
    """The run did not finish in time; ``unfinished`` lists the ranks still running."""

    def __init__(self, message: str, unfinished: list[int]) -> None:
        super().__init__(message)
        self.unfinished = unfinished


def under_torchrun() -> bool:
    """True when this process is one rank of a job started by torchrun (or any env:// launcher)."""
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def _wants_cuda(device: str | torch.device | None) -> bool:
    return device is not None and torch.device(device).type == "cuda"


def choose_backend(world_size: int, device: str | torch.device | None = None) -> str:
    """nccl when the ranks compute on CUDA and each can have its own GPU, gloo otherwise."""
    if _wants_cuda(device) and torch.cuda.is_available() and (
        torch.cuda.device_count() >= world_size and dist.is_nccl_available()
    ):
        return "nccl"
    return "gloo"


def max_world_size(backend: str) -> int:
    """The most ranks this machine can run with ``backend``."""
    if backend == "nccl":
        return torch.cuda.device_count() if torch.cuda.is_available() else 0
    return GLOO_RANKS_PER_CORE * (os.cpu_count() or 1)


def validate_world_size(world_size: int, backend: str) -> None:
    """Raise ValueError, before any process starts, when ``world_size`` cannot run here."""
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise ValueError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
    if backend == "nccl" and not dist.is_nccl_available():
        raise ValueError("backend 'nccl' is not available in this torch build; use backend='gloo'")
    limit = max_world_size(backend)
    if world_size > limit:
        if backend == "nccl":
            hint = (f"nccl needs one GPU per rank and {limit} GPU(s) are visible; use at most "
                    f"{limit} ranks or backend='gloo'")
        else:
            hint = (f"gloo allows at most {GLOO_RANKS_PER_CORE} ranks per CPU core "
                    f"({os.cpu_count()} cores here); use at most {limit} ranks")
        raise ValueError(f"cannot run {world_size} ranks on this machine: {hint}")


def rank_device(device: str | torch.device | None = None) -> torch.device:
    """The device this rank computes on: its own GPU for a CUDA run (set by the launcher or by
    LOCAL_RANK under torchrun), the CPU otherwise."""
    if _wants_cuda(device):
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _check_picklable(fn: Callable[..., Any]) -> None:
    # spawn starts a fresh interpreter that imports fn by name; a lambda or a function defined
    # inside a test would fail there with an obscure error, after some ranks already started.
    qualname = getattr(fn, "__qualname__", "")
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise TypeError(
            f"{qualname} cannot run on spawned ranks: define it at module level in an importable "
            "module (not a lambda or a nested function)"
        )
    try:
        pickle.dumps(fn)
    except Exception as exc:  # noqa: BLE001 - any pickling failure means the same thing
        raise TypeError(f"{fn!r} cannot be sent to spawned ranks: {exc}") from exc


def _to_cpu(obj: Any) -> Any:
    """Tensors moved to CPU (and detached) inside lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {key: _to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(value) for value in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_cpu(value) for value in obj)
    return obj


def _serialize(obj: Any) -> bytes:
    # Plain bytes through the queue: a tensor sent through torch's shared-memory reduction would
    # need the sending rank alive until the parent has read it, and ranks exit right away.
    buffer = io.BytesIO()
    torch.save(_to_cpu(obj), buffer)
    return buffer.getvalue()


def _deserialize(payload: bytes) -> Any:
    return torch.load(io.BytesIO(payload), weights_only=False)


def _start_context() -> Any:
    """A fresh-interpreter start method: forkserver where the platform has it, else spawn.

    Neither forks the caller, so a caller that has initialized CUDA can still start ranks that use
    CUDA. The forkserver is one clean process, started once per test process with torch already
    imported, that forks the ranks: a rank starts in milliseconds instead of paying seconds of
    `import torch` per rank per run, which is what makes many small distributed tests affordable.
    """
    if "forkserver" in torch_mp.get_all_start_methods():
        context = torch_mp.get_context("forkserver")
        context.set_forkserver_preload(["torch", "torch.distributed"])
        return context
    return torch_mp.get_context("spawn")


def _watch_parent(parent_pid: int) -> None:
    # If the test process dies (killed, crashed), nobody would end this rank; end it ourselves.
    # (Under forkserver the OS parent is the server, so the test process is watched by pid.)
    first_ppid = os.getppid()
    while True:
        try:
            os.kill(parent_pid, 0)
        except ProcessLookupError:
            os._exit(70)
        except PermissionError:
            pass
        if os.getppid() != first_ppid:
            os._exit(70)
        time.sleep(0.5)


def _rank_main(rank: int, world_size: int, backend: str, port: int, timeout: float,
               device: str | None, parent_pid: int, results: Any, lifeline: Any,
               fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
    """Entry point of one spawned rank. `lifeline` is held, never written: it closes on exit."""
    # Own process group: the parent can end this rank and anything it started with one killpg.
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    # The same variables torchrun sets, so code that reads them (or uses env://) works here too.
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world_size), LOCAL_RANK=str(rank),
                      LOCAL_WORLD_SIZE=str(world_size))
    try:
        if _wants_cuda(device):
            torch.cuda.set_device(rank % torch.cuda.device_count())
        else:
            # N CPU ranks share the cores (torchrun sets OMP_NUM_THREADS=1 for the same reason):
            # N full-size thread pools would oversubscribe them and distort every timing.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        collective_timeout = datetime.timedelta(seconds=timeout + COLLECTIVE_TIMEOUT_MARGIN)
        store = dist.TCPStore("127.0.0.1", port, world_size, is_master=False,
                              timeout=collective_timeout)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=collective_timeout)
        result = fn(rank, world_size, *args, **kwargs)
        dist.destroy_process_group()
        results.put(("ok", rank, _serialize(result)))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the test
        results.put(("error", rank, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        # Flush the report before this rank's connections close: peers notice the closed
        # connections and raise too, and the parent must read the cause before the consequences.
        results.close()
        results.join_thread()
        raise SystemExit(1) from None


def _end_ranks(processes: list[Any]) -> None:
    """Terminate every rank still alive (and what it started), then kill the stubborn ones."""
    for process in processes:
        if process.is_alive():
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                process.terminate()
    deadline = time.monotonic() + TERMINATE_GRACE
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    for process in processes:
        if process.is_alive():
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                process.kill()
            process.join(TERMINATE_GRACE)
        else:
            # The rank is gone; anything left in its process group is an orphan of this run.
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def _drain(results: Any, wait: float) -> list[tuple]:
    messages = []
    deadline = time.monotonic() + wait
    while True:
        try:
            messages.append(results.get(timeout=max(0.0, deadline - time.monotonic())))
        except queue.Empty:
            return messages


def _rank_failure(message: tuple, others: list[tuple]) -> DistributedError:
    _, rank, summary, rank_traceback = message
    other_lines = [f"rank {m[1]}: {m[2]}" for m in others if m[0] == "error"]
    text = f"rank {rank} raised {summary}\n\n--- traceback of rank {rank} ---\n{rank_traceback}"
    if other_lines:
        text += "\nother ranks failed after it:\n  " + "\n  ".join(other_lines)
    return DistributedError(text, rank=rank, rank_traceback=rank_traceback, others=other_lines)


def _first_failure(message: tuple, processes: list[Any], lifelines: list[Any],
                   finished: dict[int, Any], results: Any) -> DistributedError:
    """End every rank and build the error for the rank that failed first.

    A rank that died without reporting (os._exit, a signal) makes its peers raise connection
    errors, and those reach the parent first; the silent death is the cause worth naming. Its
    lifeline (a pipe only that rank writes to) reads EOF from the moment it exited, before any
    peer can notice, while its exit code may take a while to come back through the forkserver.
    """
    others = _drain(results, 0.2)
    reported = {message[1]} | {m[1] for m in others}
    # A short wait, not a glance: on a loaded machine the dead rank's pipe may close a moment
    # after its peer's report arrives. Only the error path pays for it.
    unreported = [lifelines[rank] for rank in range(len(lifelines))
                  if rank not in finished and rank not in reported]
    closed = set(mp_connection.wait(unreported, timeout=SILENT_DEATH_WAIT)) if unreported else set()
    silent = [rank for rank, lifeline in enumerate(lifelines) if lifeline in closed]
    if silent:
        processes[silent[0]].join(TERMINATE_GRACE)
        exitcode = processes[silent[0]].exitcode
    _end_ranks(processes)
    if silent:
        rank = silent[0]
        return DistributedError(
            f"rank {rank} died with exit code {exitcode} without reporting a result (killed by "
            f"a signal, out of memory, or os._exit?); then rank {message[1]} raised "
            f"{message[2]}\n\n--- traceback of rank {message[1]} ---\n{message[3]}",
            rank=rank, others=[f"rank {message[1]}: {message[2]}"])
    return _rank_failure(message, others)


def _run_under_torchrun(fn: Callable[..., Any], world_size: int, backend: str | None,
                        device: str | None, timeout: float, args: tuple, kwargs: dict) -> list:
    env_world = int(os.environ["WORLD_SIZE"])
    if world_size != env_world:
        raise DistributedError(
            f"this process is a torchrun rank of a {env_world}-rank job and cannot run "
            f"{world_size} ranks; start torchrun with --nproc_per_node {world_size}"
        )
    owns_group = not dist.is_initialized()
    if owns_group:
        if _wants_cuda(device):
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend or choose_backend(world_size, device),
                                timeout=datetime.timedelta(seconds=timeout))
    try:
        result = fn(dist.get_rank(), world_size, *args, **kwargs)
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, _to_cpu(result))
        return gathered
    finally:
        if owns_group:
            dist.destroy_process_group()


def run_distributed(fn: Callable[..., Any], world_size: int, *args: Any,
                    backend: str | None = None, device: str | torch.device | None = None,
                    timeout: float = DEFAULT_TIMEOUT, **kwargs: Any) -> list[Any]:
    """Run ``fn(rank, world_size, *args, **kwargs)`` on ``world_size`` ranks; return the results
    in rank order, with tensors on the CPU.

    backend: "gloo" or "nccl"; by default nccl when ``device`` is CUDA and there is a GPU per rank.
    device: where the ranks compute ("cpu" or "cuda"); a CUDA run pins rank r to GPU r.
    timeout: seconds for the whole run (and for each collective inside it).
    """
    device_name = None if device is None else str(torch.device(device))
    backend = backend or choose_backend(world_size, device_name)
    if timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout}")
    if under_torchrun():
        return _run_under_torchrun(fn, world_size, backend, device_name, timeout, args, kwargs)
    validate_world_size(world_size, backend)
    _check_picklable(fn)

    context = _start_context()
    results = context.Queue()
    # The parent holds the rendezvous store: the OS picks a free port and it stays taken.
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True,
                          timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False)
    processes, lifelines = [], []
    finished: dict[int, Any] = {}
    try:
        for rank in range(world_size):
            lifeline, rank_end = context.Pipe(duplex=False)
            process = context.Process(
                target=_rank_main,
                args=(rank, world_size, backend, store.port, timeout, device_name, os.getpid(),
                      results, rank_end, fn, args, kwargs),
                name=f"hpml-rank-{rank}", daemon=True,
            )
            process.start()
            rank_end.close()  # only the rank holds it now: EOF here means the rank has exited
            processes.append(process)
            lifelines.append(lifeline)
        deadline = time.monotonic() + timeout
        while len(finished) < world_size:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                unfinished = [r for r in range(world_size) if r not in finished]
                _end_ranks(processes)
                raise DistributedTimeout(
                    f"distributed run timed out after {timeout:g} s; ranks {unfinished} of "
                    f"{world_size} had not finished (a hang: a collective that some rank never "
                    "joined?). Every rank was killed.", unfinished)
            try:
                message = results.get(timeout=min(POLL_INTERVAL, remaining))
            except queue.Empty:
                message = None
            if message is not None:
                if message[0] == "error":
                    raise _first_failure(message, processes, lifelines, finished, results)
                finished[message[1]] = _deserialize(message[2])
                continue
            for rank, process in enumerate(processes):
                if rank in finished or process.is_alive():
                    continue
                # Dead without a result: maybe its message is still in the pipe; give it a moment.
                late = _drain(results, 0.5)
                errors = [m for m in late if m[0] == "error"]
                for m in late:
                    if m[0] != "error":
                        finished[m[1]] = _deserialize(m[2])
                own_error = [m for m in errors if m[1] == rank]
                if own_error or (errors and rank in finished):
                    first = own_error[0] if own_error else errors[0]
                    _end_ranks(processes)
                    raise _rank_failure(first, [m for m in errors if m is not first])
                if rank not in finished:
                    # The silent death is the cause; peers' connection errors are its echo.
                    _end_ranks(processes)
                    echoes = [f"rank {m[1]}: {m[2]}" for m in errors]
                    raise DistributedError(
                        f"rank {rank} died with exit code {process.exitcode} without reporting a "
                        "result (killed by a signal, out of memory, or os._exit?)"
                        + ("; then " + "; ".join(echoes) if echoes else ""),
                        rank=rank, others=echoes)
        # Every rank reported; let them exit on their own before anything is terminated.
        for process in processes:
            process.join(TERMINATE_GRACE)
    finally:
        _end_ranks(processes)
        for lifeline in lifelines:
            lifeline.close()
        results.close()
        results.join_thread()
        del store
    return [finished[rank] for rank in range(world_size)]
