"""Machine identity. The device model and count key the baseline file, and so does the
topology of a torchrun or srun job of several ranks (nodes x ranks per node, and the
interconnect where it can be read), so that a 2-node run is never compared with a 1-node run
nor a job with a single process; software versions are stored beside it, so a torch upgrade
shows as a change on the same machine, not a new one. A single process keeps the key it always
had.

Taken at pytest_configure, before xdist workers pin their GPU and before Triton's interpreter is
switched on, so nothing here may initialize CUDA in this process (CUDA_VISIBLE_DEVICES would no
longer take effect) or import triton (its @jit helpers would be decorated for the GPU, and
kernels interpreted later could not call them). GPUs are read through the driver's tools
(pytest_hpml.machine.gpus), versions from the installed packages' metadata.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import platform
import re
import sys
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from pytest_hpml.distributed import job
from pytest_hpml.machine import gpus


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def torch_cuda(modules: dict[str, Any] | None = None) -> str | None:
    """The CUDA toolkit torch was built with (torch.version.cuda), without importing torch
    where it is not imported yet: a suite that never uses torch (a JSON library's) paid 2.7 s
    of this process's start to name its machine. The installed torch/version.py is read as
    data; None where torch is absent or the file says nothing."""
    torch = (sys.modules if modules is None else modules).get("torch")
    if torch is not None:
        return getattr(getattr(torch, "version", None), "cuda", None)
    try:
        spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            tree = ast.parse((Path(folder) / "version.py").read_text(encoding="utf-8"))
        except (OSError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            target = node.targets[0] if isinstance(node, ast.Assign) and node.targets else \
                getattr(node, "target", None)
            value = getattr(node, "value", None)
            if isinstance(target, ast.Name) and target.id == "cuda" \
                    and isinstance(value, ast.Constant):
                return value.value if isinstance(value.value, str) else None
    return None


def _gpu_facts(**sources: Any) -> dict[str, Any]:
    """The GPU facts of pytest_hpml.machine.gpus, and the CUDA toolkit torch was built with
    (no CUDA call, no import of torch)."""
    facts = gpus.gpu_facts(**sources)
    facts["cuda"] = torch_cuda()
    return facts


def _version(distribution: str) -> str | None:
    """The installed version, read from package metadata rather than by importing the package
    (importing triton here would decorate its helpers before the interpreter is chosen)."""
    module = sys.modules.get(distribution)
    if module is not None and isinstance(getattr(module, "__version__", None), str):
        return module.__version__
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


INFINIBAND = "/sys/class/infiniband"


def interconnect(infiniband: str = INFINIBAND) -> str | None:
    """'ib' where the node has InfiniBand (or RoCE) adapters, read from sysfs; None where
    nothing can be read (TCP over Ethernet, or loopback on one machine, look the same)."""
    try:
        return "ib" if os.listdir(infiniband) else None
    except OSError:
        return None


def topology(environ: dict[str, str] | None = None) -> dict[str, Any]:
    """The job's shape, as plain facts, for a rank of a torchrun or srun job of several ranks:
    nodes, ranks per node and the interconnect (None where it cannot be read); nothing for a
    single process (and a job of one)."""
    try:
        found = job.current_job(environ)
    except ValueError:
        return {}
    if found is None or found.world_size < 2:
        return {}
    return {"nodes": found.nodes, "ranks_per_node": found.local_world_size,
            "interconnect": interconnect() if found.nodes > 1 else None}


@cache
def fingerprint() -> dict[str, Any]:
    facts = _gpu_facts()
    facts.update(topology())
    facts.update(
        cpu=_cpu_model(),
        cpu_cores=os.cpu_count(),
        torch=_version("torch"),
        triton=_version("triton"),
        python=platform.python_version(),
        platform=platform.platform(),
    )
    return facts


def slugify(text: str) -> str:
    text = re.sub(r"\((R|TM)\)|CPU|@.*$", "", text, flags=re.I)
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "unknown"


def machine_key(facts: dict[str, Any]) -> str:
    """'nvidia-h100-80gb-hbm3-x8' or 'intel-xeon-platinum-8481c-x2cores' for a single process;
    with a job's topology, nodes x ranks per node and the interconnect follow:
    'nvidia-h100-80gb-hbm3-x8-2x8-ib', 'intel-xeon-platinum-8481c-x2cores-2x2'."""
    if facts.get("gpu"):
        key = f"{slugify(facts['gpu'])}-x{facts.get('gpu_count') or 1}"
    else:
        key = f"{slugify(str(facts.get('cpu')))}-x{facts.get('cpu_cores')}cores"
    if facts.get("nodes"):
        key += f"-{facts['nodes']}x{facts.get('ranks_per_node')}"
        if facts.get("interconnect"):
            key += f"-{slugify(str(facts['interconnect']))}"
    return key


SOFTWARE_KEYS = ("driver", "cuda", "torch", "triton", "python")


def software_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'torch 2.4.0 -> 2.5.1' for each software version that differs."""
    return [f"{k} {old.get(k)} -> {new.get(k)}" for k in SOFTWARE_KEYS if old.get(k) != new.get(k)]
