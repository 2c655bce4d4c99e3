"""One CUDA device through NVML (nvidia-ml-py): its handle, found by the UUID torch gives it (a
whole GPU, or a MIG instance and the GPU it is part of), and its SM clock, read for the throttle
check of the CUDA clock. GPU discovery, which counts the machine's GPUs without starting CUDA, is
pytest_hpml.machine.gpus; this module serves the measure stage once CUDA runs. NVML counts its
starts: every nvmlInit here either leaves a handle to the caller or is shut down again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from functools import cache
from typing import Any

from pytest_hpml.machine.gpus import nvml_module


def nvml_lookup(pynvml: Any, uuid: str | None, index: int) -> tuple[Any, Any]:
    """(handle, whole-GPU handle) of a CUDA device in a started NVML, by UUID (so that
    CUDA_VISIBLE_DEVICES pinning holds), by index where torch has none. torch gives the UUID
    without NVML's prefix: "GPU-" for a GPU, "MIG-" for a MIG instance, tried in that order. A
    MIG instance's clocks are its GPU's. Raises LookupError naming what was tried."""
    if uuid is None:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    else:
        text = str(uuid)
        tried = [text] if text.startswith(("GPU-", "MIG-")) else [f"GPU-{text}", f"MIG-{text}"]
        for candidate in tried:
            with contextlib.suppress(Exception):  # NVMLError_NotFound: try the next form
                handle = pynvml.nvmlDeviceGetHandleByUUID(candidate)
                break
        else:
            raise LookupError(f"NVML has no device with UUID {' or '.join(tried)}")
    is_mig = getattr(pynvml, "nvmlDeviceIsMigDeviceHandle", None)
    if is_mig is not None and is_mig(handle):
        return handle, pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle)
    return handle, handle


def torch_device_identity(device: Any) -> tuple[int, str | None]:  # pragma: no cover - GPU
    """(index, UUID) of a torch CUDA device, as torch reports them (this starts CUDA)."""
    import torch

    index = device.index if device.index is not None else torch.cuda.current_device()
    return index, getattr(torch.cuda.get_device_properties(index), "uuid", None)


def nvml_device(device: Any, module: Callable[[], Any] = nvml_module,
                identify: Callable[[Any], tuple[int, str | None]] = torch_device_identity
                ) -> tuple[Any, Any, Any] | str:
    """(nvml, handle, whole-GPU handle) of a torch CUDA device, NVML left started for the
    handles' life (the caller's to shut down); or, as text, why there is none, NVML shut down
    again if it started."""
    pynvml = module()
    if pynvml is None:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # no driver access (a container, vGPU)
        return f"NVML did not start ({type(exc).__name__}: {exc})"
    try:
        index, uuid = identify(device)
        handle, gpu = nvml_lookup(pynvml, uuid, index)
    except Exception as exc:  # a lookup that failed: this start serves no handle
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()
        return f"NVML found no handle for {device} ({type(exc).__name__}: {exc})"
    return pynvml, handle, gpu


class SmClock:
    """A GPU's SM clock through NVML, beside the clock it is judged against: the default
    applications clock, else the maximum. Every NVML call is guarded: an error (vGPU, a
    container without NVML access) turns the reading off, its reason told once, not raised."""

    def __init__(self, pynvml: Any | None, handle: Any | None, problem: str | None = None) -> None:
        self._nvml, self._handle = pynvml, handle
        self.problem = problem
        self._told = False
        self.reference: float | None = None
        if problem is None:
            self.reference = self._guarded(self._reference)

    def _reference(self) -> float:
        nvml, handle = self._nvml, self._handle
        try:
            return float(nvml.nvmlDeviceGetDefaultApplicationsClock(handle, nvml.NVML_CLOCK_SM))
        except Exception:  # a GPU without applications clocks
            return float(nvml.nvmlDeviceGetMaxClockInfo(handle, nvml.NVML_CLOCK_SM))

    def _guarded(self, read: Callable[[], float]) -> float | None:
        try:
            return read()
        except Exception as exc:
            self.problem = f"NVML could not read the SM clock ({type(exc).__name__}: {exc})"
            return None

    def __call__(self) -> tuple[float, float] | None:
        """(current, reference) SM clock in MHz; None once NVML cannot say."""
        nvml = self._nvml
        current = None if self.problem else self._guarded(
            lambda: float(nvml.nvmlDeviceGetClockInfo(self._handle, nvml.NVML_CLOCK_SM)))
        return None if current is None else (current, self.reference)

    def take_problem(self) -> str | None:
        """Why the clock is not read, the first time this is asked (one warning per GPU)."""
        if self.problem is None or self._told:
            return None
        self._told = True
        return self.problem


@cache
def sm_clock(device: Any) -> SmClock:  # pragma: no cover - needs a GPU
    """The SM clock reader of a torch CUDA device, one per device and process."""
    found = nvml_device(device)
    if isinstance(found, str):
        return SmClock(None, None, problem=found)
    pynvml, _, gpu = found
    return SmClock(pynvml, gpu)
