"""The rank's side of a launched run: the process entry point, the watch on the parent, and
results sent back as plain bytes."""

from __future__ import annotations

import datetime
import io
import os
import pickle
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as torch_mp

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


def start_context() -> Any:
    """A fresh-interpreter start method: forkserver where the platform has it, else spawn.

    Neither forks the caller, so a caller that has initialized CUDA can still start ranks that use
    CUDA. The forkserver is one clean process, started once per test process with torch already
    imported, that forks the ranks: a rank starts in milliseconds instead of paying seconds of
    `import torch` per rank per run, which is what makes many small distributed tests affordable.
    """
    context = forkserver.context(RANK_PRELOAD, torch_context=True)
    return context if context is not None else torch_mp.get_context("spawn")


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


def rank_main(rank: int, world_size: int, backend: str, port: int, timeout: float,
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
        if wants_cuda(device):  # gloo ranks may share GPUs; nccl's were checked to fit
            set_rank_gpu(rank, share=True)
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
        results.put(("ok", rank, serialize(result)))
    except BaseException as exc:  # noqa: BLE001 - every failure must reach the test
        results.put(("error", rank, f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                     type(exc).__name__))
        # Flush the report before this rank's connections close: peers notice the closed
        # connections and raise too, and the parent must read the cause before the consequences.
        results.close()
        results.join_thread()
        raise SystemExit(1) from None


