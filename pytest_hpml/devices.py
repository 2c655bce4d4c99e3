"""Which devices exist, why a test is skipped, and one GPU per xdist worker.

Nothing here may initialize CUDA: CUDA_VISIBLE_DEVICES only takes effect if it is set before
the CUDA runtime starts in this process, so GPUs are counted through the driver's tools.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from functools import cache

NO_CUDA_REASON = "needs a CUDA GPU: torch finds none on this machine"


@cache
def physical_gpu_count() -> int:
    """GPUs the driver sees, counted without creating a CUDA context."""
    try:
        import pynvml  # nvidia-ml-py, an optional extra

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20)
            return len(re.findall(r"^GPU \d+:", out.stdout, flags=re.M))
        except (OSError, subprocess.SubprocessError):
            return 0
    return 0


def visible_gpu_count() -> int:
    """GPUs this process may use: the physical count narrowed by CUDA_VISIBLE_DEVICES."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    physical = physical_gpu_count()
    if visible is None:
        return physical
    entries = [v for v in visible.split(",") if v.strip() and v.strip() != "-1"]
    return min(len(entries), physical) if physical else 0


def cuda_usable() -> bool:
    """Whether torch can run CUDA work here (this one does initialize CUDA: call it late)."""
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:
        return False


def pin_worker_to_gpu(worker_id: str | None, environ: dict[str, str] | None = None) -> str | None:
    """Give xdist worker gwN one GPU (round-robin); returns the GPU index set, if any.

    Leaves an explicit CUDA_VISIBLE_DEVICES alone: the user chose the devices.
    """
    environ = os.environ if environ is None else environ
    if not worker_id or "CUDA_VISIBLE_DEVICES" in environ:
        return None
    match = re.fullmatch(r"gw(\d+)", worker_id)
    count = physical_gpu_count()
    if not match or count < 1:
        return None
    index = str(int(match.group(1)) % count)
    environ["CUDA_VISIBLE_DEVICES"] = index
    return index


def enable_triton_interpreter_without_gpu(environ: dict[str, str] | None = None) -> bool:
    """Without a GPU, run Triton kernels through its interpreter on CPU tensors.

    Must happen before any kernel module is imported: Triton reads the variable when a
    kernel is decorated. An explicit TRITON_INTERPRET from the user wins.
    """
    environ = os.environ if environ is None else environ
    if "TRITON_INTERPRET" in environ or physical_gpu_count() > 0:
        return False
    environ["TRITON_INTERPRET"] = "1"
    return True


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
