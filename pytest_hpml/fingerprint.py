"""Machine identity. The device model and count key the baseline file; software versions are
stored beside it, so a torch upgrade shows as a change on the same machine, not a new one."""

from __future__ import annotations

import os
import platform
import re
from functools import cache
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


def _gpu_facts() -> dict[str, Any]:
    facts: dict[str, Any] = {"gpu": None, "gpu_count": 0, "driver": None, "cuda": None}
    try:
        import torch

        facts["cuda"] = torch.version.cuda
        if torch.cuda.is_available():
            # The physical count: an xdist worker pinned to one GPU is still on an 8-GPU box.
            from pytest_hpml.devices import physical_gpu_count

            facts["gpu_count"] = max(physical_gpu_count(), torch.cuda.device_count())
            facts["gpu"] = torch.cuda.get_device_name(0)
    except Exception:
        return facts
    if facts["gpu"]:
        try:
            import pynvml

            pynvml.nvmlInit()
            facts["driver"] = pynvml.nvmlSystemGetDriverVersion()
            pynvml.nvmlShutdown()
        except Exception:
            facts["driver"] = _driver_from_nvidia_smi()
    return facts


def _driver_from_nvidia_smi() -> str | None:  # pragma: no cover - needs an NVIDIA driver
    """The driver version without nvidia-ml-py, from the tool every driver install ships."""
    import shutil
    import subprocess

    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def _version(module: str) -> str | None:
    try:
        return __import__(module).__version__
    except Exception:
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
