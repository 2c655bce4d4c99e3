"""The parent's side of a launched run: torch's elastic agent (torch.distributed.launcher.api,
the engine behind torchrun) starts the ranks on this node and watches them; this module adds
what a test needs around it: the rendezvous store held by this process, a deadline that ends
every rank, the rank that failed first named with its own traceback, and nothing left behind.
Under torchrun, the launcher joins the job instead."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import signal
import tempfile
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pytest_hpml.distributed.limits import (
    DEFAULT_TIMEOUT,
    POLL_INTERVAL,
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
    elastic_rank_main,
    start_method,
    to_cpu,
)
from pytest_hpml.machine import forkserver

#: The signals the agent handles while it runs (it ends the ranks, then this process gets the
#: signal as it would have without the agent: Ctrl-C, pytest-hpml's SIGTERM and SIGHUP).
AGENT_SIGNALS = ("SIGTERM", "SIGINT", "SIGHUP")


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


_job_store: list[Any] = []  # this process's connection to its job's store, once made
_runs_in: dict[str, int] = {}  # how many runs each test has started in this process so far


def _fresh_store_of_the_job(timeout: float) -> Any:
    """The job's store under a prefix no earlier run of this process used.

    Each run makes a process group and ends it; a group made again under the same prefix
    would read the addresses the earlier group's ranks left in the store, long closed ("Gloo
    connectFullMesh failed ... Connection refused"). The prefix is the test that runs (pytest
    says which in PYTEST_CURRENT_TEST) and the number of runs it started before: the same on
    every rank of a job, since every rank runs the same tests, whatever earlier tests did."""
    if not _job_store:
        agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
        # torchrun's agent serves it; else rank 0 does, sharing a server the plugin may hold.
        _job_store.append(dist.TCPStore(
            os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
            int(os.environ["WORLD_SIZE"]), is_master=not agent and os.environ["RANK"] == "0",
            timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False,
            multi_tenant=not agent))
    test = os.environ.get("PYTEST_CURRENT_TEST", "")
    _runs_in[test] = _runs_in.get(test, 0) + 1
    return dist.PrefixStore(f"pytest_hpml/runs/{test}/{_runs_in[test]}", _job_store[0])


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
        cuda = wants_cuda(device) and torch.cuda.is_available()
        # Across nodes each rank has a GPU of its own node: nccl wherever the ranks use CUDA.
        backend = backend or ("nccl" if cuda and dist.is_nccl_available() else "gloo")
        if cuda:
            # Its own GPU: cuda:LOCAL_RANK, or the one GPU srun --gpus-per-task leaves visible.
            set_rank_gpu(int(os.environ.get("LOCAL_RANK", "0")), share=backend != "nccl")
        dist.init_process_group(backend, store=_fresh_store_of_the_job(timeout),
                                rank=int(os.environ["RANK"]), world_size=env_world,
                                timeout=datetime.timedelta(seconds=timeout))
    try:
        result = fn(dist.get_rank(), world_size, *args, **kwargs)
        gathered: list[Any] = [None] * world_size
        dist.all_gather_object(gathered, to_cpu(result))
        return gathered
    finally:
        if owns_group:
            dist.destroy_process_group()


# -- what the ranks left behind ---------------------------------------------------------------

def _marked(folder: Path, kind: str) -> dict[int, Path]:
    return {int(p.name.rsplit("-", 1)[1].split(".")[0]): p for p in folder.glob(f"{kind}-*")}


def _end_process_groups(folder: Path, ranks: Iterable[int] | None = None) -> None:
    """SIGKILL each rank's process group (the rank and what it started: DataLoader workers)."""
    for rank, path in _marked(folder, "pid").items():
        if ranks is None or rank in ranks:
            with contextlib.suppress(ProcessLookupError, PermissionError, ValueError):
                os.killpg(int(path.read_text()), signal.SIGKILL)


class _Deadline:
    """Ends every rank that has not finished once `timeout` seconds have passed: a deadlocked
    collective, a rank stuck outside any collective, a rank waiting for a peer that died."""

    def __init__(self, folder: Path, world_size: int, timeout: float) -> None:
        self.folder, self.world_size, self.timeout = folder, world_size, timeout
        self.unfinished: list[int] | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="hpml-deadline", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        if self._stop.wait(self.timeout):
            return
        finished = _marked(self.folder, "done")
        unfinished = [r for r in range(self.world_size) if r not in finished]
        if unfinished:
            self.unfinished = unfinished
            _end_process_groups(self.folder, unfinished)

    def stop(self) -> None:
        self._stop.set()


def _exit_code(failure: Any) -> str:
    code = failure.exitcode
    return f"exit code {code}" + (f" ({failure.signal_name()})" if code < 0 else "")


def _explain(failures: dict[int, Any], folder: Path, world_size: int) -> DistributedError:
    """The rank that failed first, from what the ranks left: a rank that died without a word
    (os._exit, a signal, the OOM killer) is the cause and its peers' errors (connection
    closed) its echo; else the rank that raised first. Ranks the agent ended after the first
    failure (marked terminated) and ranks that finished are neither."""
    errors = {}
    for rank, path in _marked(folder, "error").items():
        try:
            errors[rank] = json.loads(path.read_text())
        except (OSError, ValueError):  # not a whole report: the rank said nothing readable
            continue
    done, ended = _marked(folder, "done"), _marked(folder, "terminated")
    silent = [r for r in range(world_size) if r not in errors and r not in done and
              r not in ended and r in _marked(folder, "pid")]
    raised = sorted(errors, key=lambda r: errors[r]["when"])
    reports = {r: (errors[r]["type"], errors[r]["summary"]) for r in raised}
    if silent:
        rank = silent[0]
        failure = failures.get(rank)
        how = f" with {_exit_code(failure)}" if failure is not None else ""
        echoes = [f"rank {r} raised {errors[r]['summary']}" for r in raised]
        detail = "".join(f"\n\n--- traceback of rank {r} ---\n{errors[r]['traceback']}"
                         for r in raised[:1])
        return DistributedError(
            f"rank {rank} died{how} without reporting a result (killed by a signal, out of "
            "memory, or os._exit?)" + ("; then " + "; ".join(echoes) if echoes else "")
            + detail, rank=rank, others=echoes, raised=reports)
    if raised:
        rank, first = raised[0], errors[raised[0]]
        others = [f"rank {r}: {errors[r]['summary']}" for r in raised[1:]]
        text = (f"rank {rank} raised {first['summary']}\n\n--- traceback of rank {rank} ---\n"
                f"{first['traceback']}")
        if others:
            text += "\nother ranks failed after it:\n  " + "\n  ".join(others)
        return DistributedError(text, rank=rank, rank_traceback=first["traceback"],
                                others=others, exception_type=first["type"], raised=reports)
    rank, failure = min(failures.items())
    return DistributedError(f"rank {rank} failed before it started ({_exit_code(failure)}): "
                            f"{failure.message}", rank=rank)


# -- the agent ----------------------------------------------------------------------------------

@contextlib.contextmanager
def _agent_signals() -> Iterator[None]:
    """The agent takes SIGTERM, SIGINT and SIGHUP while it runs (and says which signals in this
    process's environment); afterwards the handlers and the environment are as they were."""
    numbers = [getattr(signal, name) for name in AGENT_SIGNALS if hasattr(signal, name)]
    in_main = threading.current_thread() is threading.main_thread()
    before = {n: signal.getsignal(n) for n in numbers} if in_main else {}
    environment = os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE")
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)
        if environment is None:
            os.environ.pop("TORCHELASTIC_SIGNALS_TO_HANDLE", None)
        else:
            os.environ["TORCHELASTIC_SIGNALS_TO_HANDLE"] = environment


#: How many ports the rendezvous store may try before it gives up (each try is one bind).
RENDEZVOUS_PORT_TRIES = 8


def rendezvous_store(timeout: float) -> Any:
    """This process's server for a launch's static rendezvous, on a port the OS picked.

    The port stays taken while the launch runs, so two pytest-xdist workers launching at the
    same moment never race for one port. Multi-tenant: the agent's static rendezvous (one node:
    nothing to negotiate, where c10d's first round sleeps up to 0.3 s to spread nodes out) opens
    its own TCPStore on the same port in this process and is handed this server.

    That hand-over goes through a per-process cache keyed by port, which keeps the entry of a
    server already closed and does not overwrite it: after some dozens of launches in one
    process the OS hands out a port an earlier launch used, the agent finds the closed server
    and binds the port again (EADDRINUSE: seen under load in make test). So the agent's own
    open is tried here first; a failed try clears the stale entry, and a new port is taken."""
    failures = []
    for _ in range(RENDEZVOUS_PORT_TRIES):
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=timeout), multi_tenant=True)
        try:
            dist.TCPStore("127.0.0.1", store.port, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout), multi_tenant=True)
        except dist.DistNetworkError as stale:  # the cache held a closed server of this port
            failures.append(f"port {store.port}: {stale}".splitlines()[0])
            del store
            continue
        return store
    raise DistributedError(
        f"could not open a rendezvous store on 127.0.0.1 in {RENDEZVOUS_PORT_TRIES} tries: "
        + "; ".join(failures))


def _supported(config_class: type, **options: Any) -> dict[str, Any]:
    """The options that this torch's `config_class` (a dataclass) has: LaunchConfig gained
    shutdown_timeout and signals_to_handle after torch 2.4 (a GPU image's torch 2.11 has no
    shutdown_timeout); without them the agent keeps its own defaults."""
    fields = {f.name for f in dataclasses.fields(config_class)}
    return {name: value for name, value in options.items() if name in fields}


def _launch(fn: Callable[..., Any], world_size: int, backend: str, device: str | None,
            timeout: float, args: tuple, kwargs: dict) -> dict[int, bytes]:
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, SignalException
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    method = start_method()
    with tempfile.TemporaryDirectory(prefix="hpml-ranks-") as scratch:
        marks = Path(scratch, "ranks")
        marks.mkdir()
        store = rendezvous_store(timeout)
        config = LaunchConfig(
            min_nodes=1, max_nodes=1, nproc_per_node=world_size, run_id=uuid.uuid4().hex,
            rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{store.port}",
            rdzv_configs={"rank": 0, "timeout": max(1, int(timeout))},
            local_addr="127.0.0.1", max_restarts=0, monitor_interval=POLL_INTERVAL,
            start_method=method, logs_specs=DefaultLogsSpecs(log_dir=str(Path(scratch, "logs"))),
            **_supported(LaunchConfig, shutdown_timeout=max(1, int(TERMINATE_GRACE)),
                         signals_to_handle=",".join(AGENT_SIGNALS)))
        deadline = _Deadline(marks, world_size, timeout)
        try:
            with _agent_signals():
                return elastic_launch(config, elastic_rank_main)(
                    fn, args, kwargs, backend, timeout, device, os.getpid(), str(marks))
        except ChildFailedError as failed:
            if deadline.unfinished is not None:
                raise DistributedTimeout(
                    f"distributed run timed out after {timeout:g} s; ranks "
                    f"{deadline.unfinished} of {world_size} had not finished (a hang: a "
                    "collective that some rank never joined?). Every rank was killed.",
                    deadline.unfinished) from None
            raise _explain(failed.failures, marks, world_size) from None
        except SignalException as stopped:
            # The agent has ended the ranks; the signal now does what it does in this process.
            handler = signal.getsignal(stopped.sigval)
            if callable(handler):
                handler(stopped.sigval, None)
            raise KeyboardInterrupt(str(stopped)) from None
        finally:
            deadline.stop()
            _end_process_groups(marks)  # what a rank left running (it watches us, too)
            del store


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
    if timeout <= 0:
        raise ValueError(f"timeout must be positive seconds, got {timeout}")
    if under_torchrun():
        return _run_under_torchrun(fn, world_size, backend, device_name, timeout, args, kwargs)
    backend = backend or choose_backend(world_size, device_name)
    validate_world_size(world_size, backend)
    check_picklable(fn)
    returned = _launch(fn, world_size, backend, device_name, timeout, args, kwargs)
    return [deserialize(returned[rank]) for rank in range(world_size)]
