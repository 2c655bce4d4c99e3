"""The rank's side of a launched run: the entry point torch's elastic agent starts in each
rank, the watch on the parent, and what the rank leaves for the parent to read: its pid (its
process group), its error (type, message, traceback, when), that it finished, or that the
agent terminated it. The result goes back as plain bytes."""

from __future__ import annotations

import datetime
import io
import json
import os
import pickle
import signal
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pytest_hpml.distributed.limits import (
    COLLECTIVE_TIMEOUT_MARGIN,
    set_rank_gpu,
    wants_cuda,
)
from pytest_hpml.machine import forkserver


def check_picklable(fn: Callable[..., Any]) -> None:
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


def to_cpu(obj: Any) -> Any:
    """Tensors moved to CPU (and detached) inside lists, tuples and dicts."""
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {key: to_cpu(value) for key, value in obj.items()}
    if isinstance(obj, list):
        return [to_cpu(value) for value in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(to_cpu(value) for value in obj)
    return obj


def serialize(obj: Any) -> bytes:
    # Plain bytes through the queue: a tensor sent through torch's shared-memory reduction would
    # need the sending rank alive until the parent has read it, and ranks exit right away.
    buffer = io.BytesIO()
    torch.save(to_cpu(obj), buffer)
    return buffer.getvalue()


def deserialize(payload: bytes) -> Any:
    return torch.load(io.BytesIO(payload), weights_only=False)


#: What every rank imports before it runs anything: preloaded in the forkserver the ranks are
#: forked from.
RANK_PRELOAD = ("torch", "torch.distributed")


def start_method() -> str:
    """How the agent starts ranks: forked from a clean forkserver where the platform has one,
    else spawned. Neither forks the caller, so a caller that has initialized CUDA can still
    start ranks that use CUDA. The forkserver is one process, started once per test process
    with torch already imported (the process's one forkserver: machine/forkserver.py, shared
    with the comparison's fresh processes), that forks the ranks: a rank starts in milliseconds
    instead of paying seconds of `import torch` per rank per run, which is what makes many
    small distributed tests affordable."""
    return "forkserver" if forkserver.context(RANK_PRELOAD) is not None else "spawn"


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


def _default_sigterm() -> None:
    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _say_when_terminated(marks: Path, rank: int) -> None:
    """When the agent terminates this rank (SIGTERM: a peer failed, or the run was stopped),
    leave a mark and end the rank and what it started at once. Python runs a signal handler
    only when the main thread is back in the interpreter, which a rank blocked in a collective
    is not; the signal's byte on the wakeup fd is written at once, and a thread reads it."""
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    signal.signal(signal.SIGTERM, lambda number, frame: None)
    signal.set_wakeup_fd(write_end)
    # What the rank forks (DataLoader workers) must neither ignore SIGTERM nor write to the pipe.
    os.register_at_fork(after_in_child=_default_sigterm)

    def watch() -> None:
        while os.read(read_end, 1) != bytes([signal.SIGTERM]):
            pass
        (marks / f"terminated-{rank}").touch()
        os.killpg(0, signal.SIGKILL)

    threading.Thread(target=watch, name="hpml-sigterm", daemon=True).start()


def elastic_rank_main(fn: Callable[..., Any], args: tuple, kwargs: dict, backend: str,
                      timeout: float, device: str | None, parent_pid: int,
                      marks: str) -> bytes:
    """What the elastic agent runs in each rank: torch's env:// variables are set (RANK,
    WORLD_SIZE, MASTER_ADDR/PORT of the agent's store); join the group, run fn, return its
    result as bytes. A rank that raises leaves its error for the parent and raises on: the
    agent then ends every rank."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    folder = Path(marks)
    # Own process group: the parent can end this rank and anything it started with one killpg.
    try:
        os.setpgid(0, 0)
    except OSError:
        pass
    (folder / f"pid-{rank}").write_text(str(os.getpid()))
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    _say_when_terminated(folder, rank)
    try:
        if wants_cuda(device):  # gloo ranks may share GPUs; nccl's were checked to fit
            set_rank_gpu(int(os.environ.get("LOCAL_RANK", rank)), share=True)
        else:
            # N CPU ranks share the cores (torchrun sets OMP_NUM_THREADS=1 for the same reason):
            # N full-size thread pools would oversubscribe them and distort every timing.
            torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
        dist.init_process_group(backend, timeout=datetime.timedelta(
            seconds=timeout + COLLECTIVE_TIMEOUT_MARGIN))
        result = serialize(fn(rank, world_size, *args, **kwargs))
        dist.destroy_process_group()
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the test
        # Written whole or not at all (a rename): the agent may end this rank mid-write, and
        # the parent read an empty file as the report of a rank that raised.
        error = folder / f"error-{rank}.json"
        partial = folder / f".error-{rank}.json.partial"
        partial.write_text(json.dumps({
            "summary": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc(),
            "type": type(exc).__name__, "when": time.monotonic()}))
        os.replace(partial, error)
        raise
    (folder / f"done-{rank}").touch()
    return result
