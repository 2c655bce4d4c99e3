"""The machine's GPUs, found through the driver's tools: the one place that runs nvidia-smi,
starts NVML (nvidia-ml-py) and asks torch in a child process, for GPU discovery, the machine's
fingerprint and the device readings of the measure stage alike.

Nothing here may initialize CUDA in this process: CUDA_VISIBLE_DEVICES only takes effect if it
is set before the CUDA runtime starts, and xdist workers pin themselves in pytest_configure.
GPUs are counted through nvidia-ml-py and nvidia-smi and, where neither is installed (a
container started with only the compute capability), by asking torch in a subprocess. The
finding is handed to child processes (xdist workers, ranks) through the environment, so the
subprocess runs once per session. The parsing of each tool's output is a function of its text,
tested on recorded outputs.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

#: Where the controller leaves its finding for xdist workers: "<count>|<conclusive>|<how>".
DISCOVERY_ENV = "PYTEST_HPML_GPUS"
#: Device nodes an NVIDIA (or ROCm, or WSL) GPU shows in a container or host.
GPU_DEVICE_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/dxg", "/dev/kfd")
TORCH_COUNT_PROBE = ("import torch; print(torch.cuda.device_count() if torch.cuda.is_available() "
                     "else 0)")
#: The device name of GPU 0 as torch reports it, in a child process (this one's CUDA untouched).
TORCH_NAME_PROBE = "import torch; print(torch.cuda.get_device_name(0))"

Run = Callable[..., subprocess.CompletedProcess]


# -- the tools ---------------------------------------------------------------------------------

def nvidia_smi(args: Sequence[str], run: Run = subprocess.run) -> str | None:
    """nvidia-smi's stdout, or None when it is missing or fails."""
    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    try:
        out = run([smi, *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


@cache
def gpu_listing() -> str | None:
    """`nvidia-smi -L`, run once per process (discovery and the fingerprint both read it)."""
    return nvidia_smi(["-L"])


def nvml_module() -> Any:
    """nvidia-ml-py (an optional extra), or None."""
    try:
        import pynvml
    except ImportError:
        return None
    return pynvml


@contextlib.contextmanager
def nvml_session(pynvml: Any) -> Iterator[Any]:
    """NVML started for the block (NVML counts its starts: every start has its shutdown)."""
    pynvml.nvmlInit()
    try:
        yield pynvml
    finally:
        pynvml.nvmlShutdown()


def ask_torch(code: str, run: Run = subprocess.run,
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


# -- parsing their output ------------------------------------------------------------------------

def _text(value: Any) -> str:
    """nvidia-ml-py before 11.515 returns bytes where later versions return str."""
    return value.decode() if isinstance(value, bytes) else str(value)


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
    """The GPUs of `nvidia-smi -L`; MIG lines are parts of the GPU above them, not GPUs:

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


def nvml_facts(pynvml: Any) -> tuple[list[str], str | None]:
    """(GPU names, driver version) through an nvidia-ml-py module; raises what NVML raises."""
    with nvml_session(pynvml):
        names = [_text(pynvml.nvmlDeviceGetName(pynvml.nvmlDeviceGetHandleByIndex(i)))
                 for i in range(int(pynvml.nvmlDeviceGetCount()))]
        return names, _text(pynvml.nvmlSystemGetDriverVersion()).strip() or None


# -- how many GPUs -------------------------------------------------------------------------------

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


def count_with_nvml(module: Callable[[], Any] = nvml_module) -> int | None:
    pynvml = module()
    if pynvml is None:
        return None
    try:
        with nvml_session(pynvml):
            return int(pynvml.nvmlDeviceGetCount())
    except Exception:  # NVML without a driver, a version mismatch: ask the other tools
        return None


def count_with_nvidia_smi(listing: Callable[[], str | None] = gpu_listing) -> int | None:
    out = listing()
    return None if out is None else len(parse_gpu_list(out))


def count_with_torch_subprocess(run: Run = subprocess.run,
                                environ: Mapping[str, str] | None = None) -> int | None:
    """torch.cuda.device_count() in a child process; None when it fails."""
    answer = ask_torch(TORCH_COUNT_PROBE, run, environ)
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


# -- which GPUs ----------------------------------------------------------------------------------

def gpu_facts(count: Callable[[], int] | None = None,
              smi: Callable[[Sequence[str]], str | None] | None = None,
              nvml: Callable[[], Any] | None = None,
              torch_name: Callable[[], str | None] | None = None) -> dict[str, Any]:
    """GPU model (of GPU 0), count and driver version, without initializing CUDA.

    The name comes from `nvidia-smi -L`, which also lists MIG instances, else nvidia-ml-py,
    else torch in a subprocess; the driver from nvidia-ml-py, else nvidia-smi. Each source
    defaults to this module's function of that name, looked up at call time (tests pass
    fakes)."""
    count = count or physical_gpu_count
    nvml = nvml or nvml_module
    torch_name = torch_name or (lambda: ask_torch(TORCH_NAME_PROBE))
    facts: dict[str, Any] = {"gpu": None, "gpu_count": count(), "driver": None}
    if not facts["gpu_count"]:
        return facts
    nvml_names: list[str] = []
    module = nvml()
    if module is not None:
        try:
            nvml_names, facts["driver"] = nvml_facts(module)
        except Exception:  # NVML without a driver, a version mismatch: use the other tools
            pass
    # `nvidia-smi -L` runs at most once per process (discovery may have read it).
    text = smi(["-L"]) if smi else gpu_listing()
    gpus = parse_gpu_list(text) if text else []
    name = gpus[0].model if gpus else nvml_names[0] if nvml_names else torch_name()
    # A GPU machine whose model no tool could name keeps a GPU key, never its CPU's.
    facts["gpu"] = name or "unknown GPU"
    if facts["driver"] is None:
        query = (smi or nvidia_smi)(["--query-gpu=driver_version", "--format=csv,noheader"])
        facts["driver"] = parse_driver_version(query) if query else None
    return facts


# -- one GPU through NVML ------------------------------------------------------------------------

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


def nvml_device(device: Any) -> tuple[Any, Any, Any] | str:  # pragma: no cover - needs a GPU
    """(nvml, handle, whole-GPU handle) of a torch CUDA device, NVML left started for the
    handles' life; or, as text, why there is none."""
    pynvml = nvml_module()
    if pynvml is None:
        return "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        import torch

        pynvml.nvmlInit()
        index = device.index if device.index is not None else torch.cuda.current_device()
        uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
        handle, gpu = nvml_lookup(pynvml, uuid, index)
    except Exception as exc:  # no driver access (a container, vGPU), a lookup that failed
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
