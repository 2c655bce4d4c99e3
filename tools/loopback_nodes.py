"""Nodes on one machine: N torchrun agents on 127.0.0.1 (c10d rendezvous, node 0 hosting its
store), each starting G ranks of `python -m pytest ARGS`, as N nodes of a cluster would; rank
0's output is printed, then each agent's exit status and the wall time.

    python tools/loopback_nodes.py --nodes 2 --nproc-per-node 2 -- \\
        suites -m data_parallel --hpml-profile quick --hpml-report=out/report.md

--kill-rank R --kill-after S sends SIGKILL to rank R once S seconds have passed (found by its
environment: this run's rendezvous id and RANK=R), as a node's OOM killer would, and says how
long the agents took to end after it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_hpml.distributed import fresh_environment  # noqa: E402


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def find_rank(run_id: str, rank: int) -> int | None:
    """The pid of rank `rank` of this run, read from /proc (Linux)."""
    wanted = {f"TORCHELASTIC_RUN_ID={run_id}".encode(), f"RANK={rank}".encode()}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environment = set((entry / "environ").read_bytes().split(b"\0"))
        except OSError:
            continue
        if wanted <= environment:
            return int(entry.name)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=2)
    parser.add_argument("--nproc-per-node", type=int, default=2)
    parser.add_argument("--kill-rank", type=int, default=None)
    parser.add_argument("--kill-after", type=float, default=30.0)
    parser.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    pytest_args = [a for a in args.pytest_args if a != "--"]
    run_id = f"loopback-{uuid.uuid4().hex[:8]}"
    endpoint = f"127.0.0.1:{free_port()}"
    env = fresh_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    logs = Path(tempfile.mkdtemp(prefix="loopback-nodes-"))
    started = time.monotonic()
    agents = []
    for node in range(args.nodes):
        command = [sys.executable, "-m", "torch.distributed.run", f"--nnodes={args.nodes}",
                   f"--nproc-per-node={args.nproc_per_node}", "--rdzv-backend=c10d",
                   f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
                   f"--rdzv-conf=is_host={int(node == 0)}", "--local-ranks-filter=0",
                   f"--log-dir={logs / f'node{node}'}", "--tee=3",
                   "-m", "pytest", *pytest_args]
        log = (logs / f"node{node}.log").open("w")
        agents.append((subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT),
                       log))
    killed = {}
    if args.kill_rank is not None:
        def kill() -> None:
            time.sleep(args.kill_after)
            pid = find_rank(run_id, args.kill_rank)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed["at"] = time.monotonic()
                print(f"killed rank {args.kill_rank} (pid {pid}) {args.kill_after:g} s in",
                      flush=True)
        threading.Thread(target=kill, daemon=True).start()
    codes = []
    for process, log in agents:
        codes.append(process.wait())
        log.close()
    ended = time.monotonic()
    # torchrun --tee marks each line with its rank ("[default0]:"): rank 0's alone is shown.
    print(re.sub(r"\[default\d+\]:", "", (logs / "node0.log").read_text()), end="")
    print(f"agents' exit statuses: {codes}; {ended - started:.0f} s wall"
          + (f"; the agents ended {ended - killed['at']:.0f} s after the kill" if killed
             else "") + f"; every agent's output, and every rank's, in {logs}")
    return max(codes, key=abs)


if __name__ == "__main__":
    raise SystemExit(main())
