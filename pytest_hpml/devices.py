"""Which GPUs exist and how they were found, one GPU per xdist worker, Triton's interpreter
without a GPU, and the skips of `gpu` / `multi_gpu(n)` tests (a pytest plugin module).

Nothing here may initialize CUDA in this process: CUDA_VISIBLE_DEVICES only takes effect if it
is set before the CUDA runtime starts, and xdist workers pin themselves in pytest_configure.
GPUs are counted through the driver's tools (nvidia-ml-py, nvidia-smi) and, where neither is
installed (a container started with only the compute capability), by asking torch in a
subprocess. The controller's finding is handed to xdist workers through the environment, so
the subprocess runs once per session.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

NO_CUDA_REASON = "needs a CUDA GPU: none was found on this machine"
#: Where the controller leaves its finding for xdist workers: "<count>|<how>".
DISCOVERY_ENV = "PYTEST_HPML_GPUS"
#: Device nodes an NVIDIA (or ROCm, or WSL) GPU shows in a container or host.
GPU_DEVICE_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")
TORCH_PROBE = ("import torch; print(torch.cuda.device_count() if torch.cuda.is_available() "
               "else 0)")


@dataclass(frozen=True)
class GpuDiscovery:
    """How many GPUs the machine has and how that was found out. `conclusive` is False when
    every method failed (a timeout, a crash): then a GPU may well be present."""

    count: int
    method: str
    conclusive: bool = True

    def encode(self) -> str:
        return f"{self.count}|{int(self.conclusive)}|{self.method}"

    @classmethod
    def decode(cls, text: str) -> GpuDiscovery | None:
        parts = text.split("|", 2)
        if len(parts) != 3 or not parts[0].isdigit():
            return None
        return cls(int(parts[0]), parts[2], parts[1] == "1")


def count_with_nvml() -> int | None:
    try:
        import pynvml  # nvidia-ml-py, an optional extra

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def parse_nvidia_smi_list(stdout: str) -> int:
    """GPUs in `nvidia-smi -L` output ("GPU 0: NVIDIA H100 ... (UUID: GPU-...)"); MIG lines
    ("  MIG 1g.10gb Device 0: ...") are parts of a GPU, not GPUs."""
    return len(re.findall(r"^GPU \d+:", stdout, flags=re.M))


def count_with_nvidia_smi(run: Callable[..., subprocess.CompletedProcess] = subprocess.run
                          ) -> int | None:
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = run([smi, "-L"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return parse_nvidia_smi_list(out.stdout) if out.returncode == 0 else None


def ask_torch(code: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
              environ: Mapping[str, str] | None = None) -> str | None:
    """The last line `code` prints when run with torch in a child process (torch may warn
    before it), CUDA_VISIBLE_DEVICES removed so the answer is the machine's; this process's
    CUDA stays untouched. None when the child fails or prints nothing."""
    env = dict(os.environ if environ is None else environ)
    env.pop("CUDA_VISIBLE_DEVICES", None)
    try:
        out = run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                  env=env)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        return None
    return lines[-1].strip() or None


def count_with_torch_subprocess(run: Callable[..., subprocess.CompletedProcess] = subprocess.run,
                                environ: Mapping[str, str] | None = None) -> int | None:
    """torch.cuda.device_count() in a child process; None when it fails."""
    answer = ask_torch(TORCH_PROBE, run, environ)
    return int(answer) if answer is not None and answer.isdigit() else None


def discover(nvml: Callable[[], int | None] = count_with_nvml,
             smi: Callable[[], int | None] = count_with_nvidia_smi,
             torch_probe: Callable[[], int | None] = count_with_torch_subprocess,
             device_nodes: Callable[[], bool] | None = None) -> GpuDiscovery:
    """The first method that answers: nvidia-ml-py, nvidia-smi, then torch in a subprocess
    (skipped when the machine has no GPU device node at all, which costs nothing to see)."""
    for method, probe in (("nvidia-ml-py", nvml), ("nvidia-smi", smi)):
        found = probe()
        if found is not None:
            return GpuDiscovery(found, method)
    has_nodes = device_nodes() if device_nodes else any(Path(p).exists() for p in GPU_DEVICE_NODES)
    if not has_nodes:
        return GpuDiscovery(0, "no GPU device node (/dev/nvidia*), no nvidia-smi")
    found = torch_probe()
    if found is not None:
        return GpuDiscovery(found, "torch in a subprocess (no nvidia-ml-py, no nvidia-smi)")
    return GpuDiscovery(0, "GPU device nodes present but torch could not count the GPUs",
                        conclusive=False)


@cache
def discovery() -> GpuDiscovery:
    """This machine's GPUs: inherited from the controller when there is one, else found."""
    inherited = GpuDiscovery.decode(os.environ.get(DISCOVERY_ENV, ""))
    if inherited is not None:
        return inherited
    found = discover()
    os.environ[DISCOVERY_ENV] = found.encode()  # for xdist workers and rank processes
    return found


def physical_gpu_count() -> int:
    """GPUs the machine has, counted without creating a CUDA context in this process."""
    return discovery().count


def visible_entries(visible: str | None, physical: int) -> list[str] | None:
    """The GPUs CUDA_VISIBLE_DEVICES names, read as CUDA reads it: entries up to the first
    invalid one ("0,-1,1" is one GPU; "0,7" on a 2-GPU machine is one GPU). None: not set."""
    if visible is None:
        return None
    entries = []
    for raw in visible.split(","):
        entry = raw.strip()
        if re.fullmatch(r"\d+", entry):
            if int(entry) >= physical or entry in entries:
                break
        elif not re.fullmatch(r"(GPU|MIG)-[0-9A-Za-z/-]+", entry):
            break  # "", "-1", garbage: CUDA stops here
        entries.append(entry)
    return entries


def visible_gpu_count(environ: Mapping[str, str] | None = None) -> int:
    """GPUs this process may use: the physical count narrowed by CUDA_VISIBLE_DEVICES."""
    environ = os.environ if environ is None else environ
    physical = physical_gpu_count()
    entries = visible_entries(environ.get("CUDA_VISIBLE_DEVICES"), physical)
    return physical if entries is None else min(len(entries), physical)


def cuda_usable() -> bool:
    """Whether torch can run CUDA work here (this one does initialize CUDA: call it late)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pin_worker_to_gpu(worker_id: str | None,
                      environ: MutableMapping[str, str] | None = None) -> str | None:
    """Give xdist worker gwN one GPU, round-robin over the GPUs this run may use: those of an
    existing CUDA_VISIBLE_DEVICES (as SLURM sets for a --gres job), else all of them.
    Returns the entry set, if any."""
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    physical = physical_gpu_count()
    if not match or physical < 1:
        return None
    entries = visible_entries(environ.get("CUDA_VISIBLE_DEVICES"), physical)
    if entries is None:
        entries = [str(i) for i in range(physical)]
    if not entries:
        return None  # the user hid every GPU
    choice = entries[int(match.group(1)) % len(entries)]
    environ["CUDA_VISIBLE_DEVICES"] = choice
    return choice


def enable_triton_interpreter_without_gpu(environ: MutableMapping[str, str] | None = None
                                          ) -> bool:
    """Without a GPU, run Triton kernels through its interpreter on CPU tensors.

    Must happen before any kernel module is imported: Triton reads the variable when a
    kernel is decorated. An explicit TRITON_INTERPRET from the user wins, and an inconclusive
    discovery (a GPU may be there) never forces the interpreter.
    """
    environ = os.environ if environ is None else environ
    found = discovery()
    if "TRITON_INTERPRET" in environ or found.count > 0 or not found.conclusive:
        return False
    environ["TRITON_INTERPRET"] = "1"
    return True


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def xdist_workers(config: pytest.Config) -> int:
    """The number of xdist workers this run starts (0 without -n)."""
    value = getattr(config.option, "numprocesses", None)
    if value in (None, 0):
        return 0
    if isinstance(value, int):
        return value
    return os.cpu_count() or 1  # "auto" and "logical": xdist picks about one per core


def gpus_needed(item: pytest.Item) -> int:
    """1 for @gpu, n for @multi_gpu(n); a malformed multi_gpu is a usage error naming the test."""
    marker = item.get_closest_marker("multi_gpu")
    if marker is None:
        return 1
    value = marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise pytest.UsageError(f"{item.nodeid}: @pytest.mark.multi_gpu takes one positive "
                                f"int, the GPUs it needs (e.g. multi_gpu(2)), got "
                                f"{marker.args or ''}{marker.kwargs or ''}")
    return value


# -- pytest hooks -------------------------------------------------------------------------------

@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with a reason when there "
                            "is none")
    config.addinivalue_line("markers", "multi_gpu(n): needs at least n CUDA GPUs visible to "
                            "this process")
    worker = getattr(config, "workerinput", {}).get("workerid")
    # Both must happen before CUDA or Triton kernels are touched by test modules.
    pin_worker_to_gpu(worker)
    enable_triton_interpreter_without_gpu()


def pytest_report_header(config: pytest.Config) -> list[str]:
    found = discovery()
    lines = [f"hpml: GPUs: {found.count} found by {found.method}; visible to this run: "
             f"{visible_gpu_count()}"]
    workers = xdist_workers(config)
    usable = visible_gpu_count()
    if usable and workers > usable:
        lines.append(f"hpml: {workers} xdist workers share {usable} GPU(s): GPU timings of "
                     f"concurrent tests disturb each other; use -n {usable} for figures")
    if triton_interpreted():
        lines.append("hpml: Triton runs in its interpreter (TRITON_INTERPRET=1): kernel "
                     "timings are correctness runs, not performance figures")
    return lines


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [i for i in items if i.get_closest_marker("gpu") or
                 i.get_closest_marker("multi_gpu")]
    if not gpu_items:
        return
    have = visible_gpu_count()
    cuda_ok = have > 0 and cuda_usable()
    for item in gpu_items:
        need = gpus_needed(item)
        if not cuda_ok:
            reason = NO_CUDA_REASON if have == 0 else (
                f"needs a CUDA GPU: {have} found ({discovery().method}) but torch cannot use "
                "them (a CPU-only torch build, or a driver too old for it)")
            item.add_marker(pytest.mark.skip(reason=reason))
        elif have < need:
            pinned = " (xdist pins each worker to one GPU: run without -n)" if hasattr(
                config, "workerinput") else ""
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPUs, {have} visible{pinned}"))
