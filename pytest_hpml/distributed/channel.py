"""The plugin's own messages between the ranks of a pytest job: a c10d TCPStore, the store
torchrun already runs for the job (or, under srun, one rank 0 opens where torch's env://
rendezvous will look for it), under a prefix of its own.

Why a store and not a process group: the tests own the job's default process group (a user's
fixture calls init_process_group, DDP wants nccl, run_distributed makes and ends one per run),
and the plugin must not take it from them or depend on its backend; every store operation has
a timeout, so a rank that died or hangs shows as a missing key, never as a hang; and rank 0
reading its peers' keys is a gather without any collective the peers must all enter.

Liveness: every rank adds to its own heartbeat counter every second from a thread (with a
connection of its own). A rank that is waited for and whose counter stopped moving for
SILENT_AFTER seconds is gone (killed, crashed); one that is alive but does not answer is
waited for up to the time cap (its test may still be running). A rank that ends its session
says so (``leave``), and is not waited for after that.
"""

from __future__ import annotations

import datetime
import os
import threading
import time
from collections.abc import Iterable
from typing import Any

from pytest_hpml.distributed.job import Job

PREFIX = "pytest_hpml/"
HEARTBEAT = 1.0
#: Seconds without a heartbeat after which a rank counts as gone. Generous: on an overloaded
#: machine a thread may wait seconds for the interpreter lock.
SILENT_AFTER = 20.0
#: How often a waiter looks at who is gone. Between looks it polls the keys with a growing
#: pause up to POLL_MAX: the store's own timed wait would log a warning at every timeout.
LOOK_EVERY = 1.0
POLL_MAX = 0.05
#: Seconds to connect to the job's store (rank 0 may still be importing torch).
CONNECT_TIMEOUT = 300.0


class JobChannelError(RuntimeError):
    """A peer rank did not answer: gone, left, or not within the time cap."""

    def __init__(self, message: str, ranks: Iterable[int] = ()) -> None:
        super().__init__(message)
        self.ranks = sorted(ranks)


def _open_store(job: Job, timeout: float, serve: bool) -> Any:
    import torch.distributed as dist

    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    # torchrun's agent hosts a store at MASTER_ADDR:MASTER_PORT for its workers. Without an
    # agent (srun) rank 0 hosts it there, multi-tenant: the tests' init_process_group(env://)
    # in this process then shares its server instead of failing to bind the port again.
    return dist.TCPStore(job.master_addr, job.master_port, job.world_size,
                         is_master=serve and not agent_store and job.rank == 0,
                         timeout=datetime.timedelta(seconds=timeout), wait_for_workers=False,
                         multi_tenant=not agent_store)


class JobChannel:
    """Keys posted by one rank and read by another, with waits bounded by ``cap`` seconds."""

    def __init__(self, job: Job, cap: float, store: Any = None,
                 heartbeat_store: Any = None) -> None:
        import torch.distributed as dist

        self.job = job
        self.cap = cap
        base = store if store is not None else _open_store(job, CONNECT_TIMEOUT, serve=True)
        self._store = dist.PrefixStore(PREFIX, base)
        self._base = base  # the server lives as long as this object holds it (rank 0, srun)
        self._beats: dict[int, tuple[int, float]] = {}
        self._stop = threading.Event()
        # Its own connection: the heartbeat thread never waits behind the main thread's calls.
        beat_base = heartbeat_store if heartbeat_store is not None else (
            base if store is not None else _open_store(job, CONNECT_TIMEOUT, serve=False))
        self._beat_store = dist.PrefixStore(PREFIX, beat_base)
        self._beat_store.add(f"beat/{job.rank}", 1)
        self._thread = threading.Thread(target=self._heartbeat, name="hpml-heartbeat",
                                        daemon=True)
        self._thread.start()

    # -- liveness -------------------------------------------------------------------------
    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT):
            try:
                self._beat_store.add(f"beat/{self.job.rank}", 1)
            except Exception:  # noqa: BLE001 - a store gone for good: the waits will say so
                continue

    def _silent_for(self, rank: int) -> float:
        now = time.monotonic()
        count = self._store.add(f"beat/{rank}", 0)
        last = self._beats.get(rank)
        if last is None or last[0] != count:
            self._beats[rank] = (count, now)
            return 0.0
        return now - last[1]

    def left(self, rank: int) -> str | None:
        """Why ``rank`` ended its session, if it did."""
        key = f"left/{rank}"
        return self._store.get(key).decode() if self._store.check([key]) else None

    def leave(self, reason: str) -> None:
        """This rank's session is over: nobody waits for it any more."""
        self._store.set(f"left/{self.job.rank}", reason)

    def close(self) -> None:
        self._stop.set()

    # -- messages -------------------------------------------------------------------------
    def post(self, key: str, value: bytes | str) -> None:
        self._store.set(key, value)

    def _all_posted(self, keys: list[str], what: str, pending: Iterable[int]) -> bool:
        try:
            return self._store.check(keys)
        except Exception as exc:  # noqa: BLE001 - DistNetworkError: the server is gone
            raise JobChannelError(
                f"the job's store at {self.job.master_addr}:{self.job.master_port} stopped "
                f"answering while waiting for {what} ({exc}); the node that hosts it may have "
                "ended", pending) from exc

    def wait_for(self, keys: dict[int, str], what: str, cap: float | None = None) -> None:
        """Return once every rank in ``keys`` has posted its key; raise JobChannelError naming
        the ranks that left, went silent, or were not done within the cap."""
        cap = self.cap if cap is None else cap
        start = time.monotonic()
        pending, pause, looked = dict(keys), 0.0005, start
        while not self._all_posted(list(pending.values()), what, pending):
            time.sleep(pause)
            pause = min(POLL_MAX, pause * 2)
            now = time.monotonic()
            if now - looked < LOOK_EVERY and now - start < cap:
                continue
            looked = now
            pending = {r: k for r, k in pending.items()
                       if not self._all_posted([k], what, [r])}
            self._check_peers(pending, what, cap, now - start >= cap)

    def _check_peers(self, pending: dict[int, str], what: str, cap: float,
                     over: bool) -> None:
        left = {r: self.left(r) for r in pending}
        left = {r: why for r, why in left.items() if why is not None}
        if left:
            raise JobChannelError(self._left_message(left, pending, what), pending)
        silent = [r for r in pending if self._silent_for(r) > SILENT_AFTER]
        if silent:
            raise JobChannelError(
                f"rank(s) {', '.join(map(str, silent))} stopped answering (no heartbeat for "
                f"{SILENT_AFTER:g} s: killed, or its node went down) while waiting for {what}",
                silent)
        if over and pending:
            raise JobChannelError(
                f"rank(s) {', '.join(map(str, sorted(pending)))} did not finish {what} within "
                f"{cap:g} s (--hpml-rank-timeout); they are alive but busy or stuck (a "
                "collective that a failed peer never joined waits for its own timeout)",
                pending)

    @staticmethod
    def _left_message(left: dict[int, str], pending: dict[int, str], what: str) -> str:
        # A rank that stopped because of another says what it saw: the cause, not an echo.
        causes = [why.removeprefix("stopped: ") for why in left.values()
                  if why.startswith("stopped: ")]
        if causes:
            return causes[0]
        silent = sorted(set(pending) - set(left))
        also = f"; rank(s) {', '.join(map(str, silent))} did not answer either" if silent else ""
        return "; ".join(f"rank {r} ended its session ({why}) before {what}"
                         for r, why in sorted(left.items())) + also

    def finish_together(self, cap: float | None = None) -> list[int]:
        """Say this rank is done and wait for the others (alive, not done) up to the cap: the
        ranks of a job then exit together, so that no launcher stops a rank still printing
        its summary because a peer exited first, and a store rank 0 holds stays up while
        anyone may need it. Returns the ranks that did not say so (gone, or not in time)."""
        cap = self.cap if cap is None else cap
        self.post(f"done/{self.job.rank}", "")
        others = {r: f"done/{r}" for r in range(self.job.world_size) if r != self.job.rank}
        deadline = time.monotonic() + cap
        while others and time.monotonic() < deadline:
            try:
                others = {r: k for r, k in others.items() if not self._store.check([k])}
                gone = [r for r in others if self._silent_for(r) > SILENT_AFTER]
            except Exception:  # noqa: BLE001 - the store is gone: nobody to wait for
                break
            others = {r: k for r, k in others.items() if r not in gone}
            time.sleep(POLL_MAX)
        return sorted(others)

    def gather(self, key: str, value: bytes | str, what: str) -> dict[int, bytes] | None:
        """Every rank's value on rank 0 (None on the others)."""
        self.post(f"{key}/{self.job.rank}", value)
        if self.job.rank != 0:
            return None
        keys = {r: f"{key}/{r}" for r in range(self.job.world_size)}
        self.wait_for(keys, what)
        return dict(zip(keys, self._store.multi_get(list(keys.values())), strict=True))

    def read(self, key: str, what: str, cap: float | None = None) -> bytes:
        """Rank 0's value of ``key``, once posted."""
        self.wait_for({0: key}, what, cap)
        return self._store.get(key)
