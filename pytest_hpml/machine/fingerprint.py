"""Machine identity. The device model and count key the baseline file; software versions are
stored beside it, so a torch upgrade shows as a change on the same machine, not a new one.

Taken at pytest_configure, before xdist workers pin their GPU and before Triton's interpreter is
switched on, so nothing here may initialize CUDA in this process (CUDA_VISIBLE_DEVICES would no
longer take effect) or import triton (its @jit helpers would be decorated for the GPU, and
kernels interpreted later could not call them). GPUs are read through the driver's tools, as in
pytest_hpml.devices, and versions from the installed packages' metadata. The parsing of each
tool's output is a function of its text, tested on recorded outputs.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import metadata
from typing import Any

#: The device name of GPU 0 as torch reports it, in a child process (this one's CUDA untouched).
TORCH_NAME_PROBE = "import torch; print(torch.cuda.get_device_name(0))"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown-cpu"


# -- parsing the driver's tools ------------------------------------------------------------------

@dataclass(frozen=True)
class GpuListing:
    """One GPU of `nvidia-smi -L`: its name and the MIG instances listed under it."""

    index: int
    name: str
    mig_profiles: list[str] = field(default_factory=list)

    @property
    def model(self) -> str:
        """The name a CUDA program sees: a MIG instance is a smaller device than its GPU (CUDA
        names it "<GPU> MIG <profile>"), so its figures must not share the whole GPU's key."""
        return f"{self.name} MIG {self.mig_profiles[0]}" if self.mig_profiles else self.name


def parse_gpu_list(stdout: str) -> list[GpuListing]:
    """The GPUs of `nvidia-smi -L`:

        GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5d1c...)
          MIG 3g.40gb     Device  0: (UUID: MIG-0b7e...)
    """
    gpus: list[GpuListing] = []
    for line in stdout.splitlines():
        gpu = re.match(r"^GPU (\d+): (.+?)(?: \(UUID: [^)]*\))?\s*$", line)
        if gpu:
            gpus.append(GpuListing(int(gpu.group(1)), gpu.group(2).strip()))
            continue
        mig = re.match(r"^\s+MIG (\S+)\s+Device\s+\d+:", line)
        if mig and gpus:
            gpus[-1].mig_profiles.append(mig.group(1))
    return gpus


def parse_driver_version(stdout: str) -> str | None:
    """The driver version from `nvidia-smi --query-gpu=driver_version --format=csv,noheader`
    (one line per GPU, all the same: "570.124.06"); None for anything that is not a version
    ("[N/A]", an error message, nothing)."""
    for line in stdout.splitlines():
        text = line.strip()
        if text:
            return text if re.fullmatch(r"\d+(\.\d+)+", text) else None
    return None


def _text(value: Any) -> str:
    """nvidia-ml-py before 11.515 returns bytes where later versions return str."""
    return value.decode() if isinstance(value, bytes) else str(value)


def nvml_facts(pynvml: Any) -> tuple[list[str], str | None]:
    """(GPU names, driver version) through an nvidia-ml-py module; raises what NVML raises."""
    pynvml.nvmlInit()
    try:
        names = [_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(int(pynvml.nvmlDeviceGetCount()))]
        return names, _text(pynvml.nvmlSystemGetDriverVersion()).strip() or None
    finally:
        pynvml.nvmlShutdown()


# -- running them ------------------------------------------------------------------------------

def _nvidia_smi(args: Sequence[str]) -> str | None:  # pragma: no cover - needs an NVIDIA driver
    """nvidia-smi's stdout, or None when it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = subprocess.run([smi, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def _nvml_module() -> Any:
    """nvidia-ml-py (an optional extra), or None."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


def _name_from_torch_subprocess(
        run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str | None:
    """GPU 0's name from torch in a child process: for containers with neither nvidia-smi nor
    nvidia-ml-py."""
    from pytest_hpml.devices import ask_torch

    return ask_torch(TORCH_NAME_PROBE, run)


def _gpu_count() -> int:
    # The physical count, found without CUDA: an xdist worker pinned to one GPU is still on an
    # 8-GPU box.
    from pytest_hpml.devices import physical_gpu_count

    return physical_gpu_count()


def _gpu_facts(count: Callable[[], int] | None = None,
               smi: Callable[[Sequence[str]], str | None] | None = None,
               nvml: Callable[[], Any] | None = None,
               torch_name: Callable[[], str | None] | None = None,
               ) -> dict[str, Any]:
    """GPU model (of GPU 0), count, driver and CUDA version, without initializing CUDA.

    The name comes from `nvidia-smi -L`, which also lists MIG instances, else nvidia-ml-py,
    else torch in a subprocess; the driver from nvidia-ml-py, else nvidia-smi. Each source
    defaults to this module's function of that name, looked up at call time (tests pass
    fakes or patch the module)."""
    count = count or _gpu_count
    smi = smi or _nvidia_smi
    nvml = nvml or _nvml_module
    torch_name = torch_name or _name_from_torch_subprocess
    facts: dict[str, Any] = {"gpu": None, "gpu_count": 0, "driver": None, "cuda": None}
    try:
        import torch

        facts["cuda"] = torch.version.cuda  # the toolkit torch was built with: no CUDA call
    except ImportError:
        pass
    facts["gpu_count"] = count()
    if not facts["gpu_count"]:
        return facts
    nvml_names: list[str] = []
    module = nvml()
    if module is not None:
        try:
            nvml_names, facts["driver"] = nvml_facts(module)
        except Exception:  # NVML without a driver, a version mismatch: use the other tools
            pass
    listing = smi(["-L"])
    gpus = parse_gpu_list(listing) if listing else []
    name = gpus[0].model if gpus else nvml_names[0] if nvml_names else torch_name()
    # A GPU machine whose model no tool could name keeps a GPU key, never its CPU's.
    facts["gpu"] = name or "unknown GPU"
    if facts["driver"] is None:
        query = smi(["--query-gpu=driver_version", "--format=csv,noheader"])
        facts["driver"] = parse_driver_version(query) if query else None
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
