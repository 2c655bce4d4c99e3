"""The parent's side of a launched run: start the ranks, gather their results, and end every
rank when one fails or the run hangs; under torchrun, join the job instead."""

from __future__ import annotations

import datetime
import multiprocessing.connection as mp_connection
import os
import queue
import signal
import time
from collections.abc import Callable, Iterable
from typing import Any

import torch
import torch.distributed as dist

from pytest_hpml.distributed.limits import (
    DEFAULT_TIMEOUT,
    POLL_INTERVAL,
    SILENT_DEATH_WAIT,
    TERMINATE_GRACE,
    DistributedError,
    DistributedTimeout,
    choose_backend,
    set_rank_gpu,
    under_torchrun,
    validate_world_size,
    wants_cuda,
)
from pytest_hpml.distributed.rank import (
    RANK_PRELOAD,
    check_picklable,
    deserialize,
    rank_main,
    start_context,
    to_cpu,
)
from pytest_hpml.machine import forkserver


def preload_for_ranks(modules: Iterable[str], start: bool = True) -> list[str]:
    """Have the ranks of this process start with `modules` already imported (a lab's own
    modules, torchvision): the forkserver the ranks are forked from imports them once, instead
    of every rank of every run importing them again.

    The forkserver imports its list when it starts, once per process: call this before the
    first run (a session fixture), and with start=True it starts now, beside the collection.
    Modules asked for after it started are imported by each rank as usual. Returns the list."""
    modules = forkserver.add_preload([*RANK_PRELOAD, *modules])
    if start:
        forkserver.ensure_running()
    return modules


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
    _, rank, summary, rank_traceback, exception_type = message
    other_lines = [f"rank {m[1]}: {m[2]}" for m in others if m[0] == "error"]
    text = f"rank {rank} raised {summary}\n\n--- traceback of rank {rank} ---\n{rank_traceback}"
    if other_lines:
        text += "\nother ranks failed after it:\n  " + "\n  ".join(other_lines)
    return DistributedError(text, rank=rank, rank_traceback=rank_traceback, others=other_lines,
                            exception_type=exception_type)


def _died_silently(rank: int, exitcode: int | None, echoes: list[str],
                   detail: str = "") -> DistributedError:
    """A rank that died without reporting a result is the cause; what its peers raised after
    (connection errors, mostly) is its echo."""
    return DistributedError(
        f"rank {rank} died with exit code {exitcode} without reporting a result (killed by a "
        "signal, out of memory, or os._exit?)" + ("; then " + "; ".join(echoes) if echoes else "")
        + detail, rank=rank, others=echoes)


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
    _end_ranks(processes)
    if silent:
        return _died_silently(silent[0], processes[silent[0]].exitcode,
                              [f"rank {message[1]} raised {message[2]}"],
                              f"\n\n--- traceback of rank {message[1]} ---\n{message[3]}")
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
        backend = backend or choose_backend(world_size, device)
        if wants_cuda(device):
            set_rank_gpu(int(os.environ.get("LOCAL_RANK", "0")), share=backend != "nccl")
        dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout))
    try:
        result = fn(dist.get_rank(), world_size, *args, **kwargs)
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, to_cpu(result))
        return gathered
    finally:
        if owns_group:
            dist.destroy_process_group()


def _gather(processes: list[Any], lifelines: list[Any], results: Any,
            timeout: float) -> dict[int, Any]:
    """Each rank's result by rank, once every rank reported; on the first failure, a hang or a
    rank that died without a word, every rank is ended and the error raised."""
    world_size = len(processes)
    finished: dict[int, Any] = {}
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
            finished[message[1]] = deserialize(message[2])
            continue
        for rank, process in enumerate(processes):
            if rank in finished or process.is_alive():
                continue
            # Dead without a result: maybe its message is still in the pipe; give it a moment.
            late = _drain(results, 0.5)
            errors = [m for m in late if m[0] == "error"]
            for m in late:
                if m[0] != "error":
                    finished[m[1]] = deserialize(m[2])
            own_error = [m for m in errors if m[1] == rank]
            if own_error or (errors and rank in finished):
                first = own_error[0] if own_error else errors[0]
                _end_ranks(processes)
                raise _rank_failure(first, [m for m in errors if m is not first])
            if rank not in finished:
                _end_ranks(processes)
                raise _died_silently(rank, process.exitcode,
                                     [f"rank {m[1]} raised {m[2]}" for m in errors])
    return finished


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
    check_picklable(fn)

    context = start_context()
    results = context.Queue()
    # The parent holds the rendezvous store: the OS picks a free port and it stays taken.
    store = dist.TCPStore("127.0.0.1", 0, world_size, is_master=True,
                          timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False)
    processes, lifelines = [], []
    try:
        for rank in range(world_size):
            lifeline, rank_end = context.Pipe(duplex=False)
            process = context.Process(
                target=rank_main,
                args=(rank, world_size, backend, store.port, timeout, device_name, os.getpid(),
                      results, rank_end, fn, args, kwargs),
                # Not a daemon, so that a rank may start processes of its own (DataLoader
                # workers): multiprocessing forbids a daemon to have children. Nothing outlives
                # the run anyway: the finally below ends each rank's process group, and a rank
                # whose test process died ends itself (rank._watch_parent).
                name=f"hpml-rank-{rank}", daemon=False,
            )
            process.start()
            rank_end.close()  # only the rank holds it now: EOF here means the rank has exited
            processes.append(process)
            lifelines.append(lifeline)
        finished = _gather(processes, lifelines, results, timeout)
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
