"""Machine identity. The device model and count key the baseline file; software versions are
stored beside it, so a torch upgrade shows as a change on the same machine, not a new one.

Taken at pytest_configure, before xdist workers pin their GPU and before Triton's interpreter is
switched on, so nothing here may initialize CUDA in this process (CUDA_VISIBLE_DEVICES would no
longer take effect) or import triton (its @jit helpers would be decorated for the GPU, and
kernels interpreted later could not call them). GPUs are read through the driver's tools
(pytest_hpml.machine.gpus), versions from the installed packages' metadata.
"""

from __future__ import annotations

import os
import platform
import re
import sys
from functools import cache
from importlib import metadata
from typing import Any

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


def _gpu_facts(**sources: Any) -> dict[str, Any]:
    """The GPU facts of pytest_hpml.machine.gpus, and the CUDA toolkit torch was built with
    (read from torch.version: no CUDA call)."""
    facts = gpus.gpu_facts(**sources)
    try:
        import torch

        facts["cuda"] = torch.version.cuda
    except ImportError:
        facts["cuda"] = None
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


@cache
def fingerprint() -> dict[str, Any]:
    facts = _gpu_facts()
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
    """'nvidia-h100-80gb-hbm3-x8' or 'intel-xeon-platinum-8481c-x2cores'."""
    if facts.get("gpu"):
        return f"{slugify(facts['gpu'])}-x{facts.get('gpu_count') or 1}"
    return f"{slugify(str(facts.get('cpu')))}-x{facts.get('cpu_cores')}cores"


SOFTWARE_KEYS = ("driver", "cuda", "torch", "triton", "python")


def software_changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """'torch 2.4.0 -> 2.5.1' for each software version that differs."""
    return [f"{k} {old.get(k)} -> {new.get(k)}" for k in SOFTWARE_KEYS if old.get(k) != new.get(k)]
