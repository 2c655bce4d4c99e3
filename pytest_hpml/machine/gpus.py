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

#: Where the controller leaves its finding for xdist workers:
#: "<count>|<conclusive>|<CUDA devices, comma-separated>|<how>".
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
    mig_uuids: list[str] = field(default_factory=list)

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
        mig = re.match(r"^\s+MIG (\S+)\s+Device\s+\d+:(?: \(UUID: ([^)]*)\))?", line)
        if mig and gpus:
            gpus[-1].mig_profiles.append(mig.group(1))
            if mig.group(2):
                gpus[-1].mig_uuids.append(mig.group(2).strip())
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


def mig_devices(per_gpu: Sequence[Sequence[str] | None]) -> tuple[str, ...]:
    """The CUDA devices of a machine whose GPUs are split into MIG instances: each instance by
    its UUID (as CUDA_VISIBLE_DEVICES names it), each whole GPU by its index, a GPU in MIG mode
    without instances not at all (CUDA cannot run on it); () where no GPU is split (the
    indices are meant). `per_gpu`: each GPU's MIG UUIDs, None for a GPU not in MIG mode."""
    if all(uuids is None for uuids in per_gpu):
        return ()
    return tuple(device for index, uuids in enumerate(per_gpu)
                 for device in (uuids if uuids is not None else [str(index)]))


def nvml_mig_uuids(pynvml: Any, handle: Any) -> list[str] | None:
    """The UUIDs of a GPU's MIG instances through a started NVML; None when it is not in MIG
    mode (or has no MIG at all)."""
    try:
        current, _ = pynvml.nvmlDeviceGetMigMode(handle)
    except Exception:  # NVML_ERROR_NOT_SUPPORTED: a GPU without MIG
        return None
    if current != getattr(pynvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    uuids = []
    for slot in range(int(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle))):
        try:
            instance = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except Exception:  # NVML_ERROR_NOT_FOUND: an empty slot
            continue
        uuids.append(_text(pynvml.nvmlDeviceGetUUID(instance)))
    return uuids


# -- how many GPUs -------------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuDiscovery:
    """How many GPUs the machine has and how that was found out. `conclusive` is False when
    every method failed (a timeout, a crash): then a GPU may well be present. `devices`: the
    CUDA devices where a GPU is split into MIG instances (mig_devices); () for GPU indices."""

    count: int
    method: str
    conclusive: bool = True
    devices: tuple[str, ...] = ()

    def encode(self) -> str:
        return f"{self.count}|{int(self.conclusive)}|{','.join(self.devices)}|{self.method}"

    @classmethod
    def decode(cls, text: str) -> GpuDiscovery | None:
        parts = text.split("|", 3)
        if len(parts) != 4 or not parts[0].isdigit():
            return None
        devices = tuple(d for d in parts[2].split(",") if d)
        return cls(int(parts[0]), parts[3], parts[1] == "1", devices)


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


def devices_with_nvml(module: Callable[[], Any] = nvml_module) -> tuple[str, ...]:
    """The machine's CUDA devices by NVML where a GPU is split into MIG instances, else ()."""
    pynvml = module()
    if pynvml is None:
        return ()
    try:
        with nvml_session(pynvml):
            return mig_devices([nvml_mig_uuids(pynvml, pynvml.nvmlDeviceGetHandleByIndex(i))
                                for i in range(int(pynvml.nvmlDeviceGetCount()))])
    except Exception:  # NVML that cannot list its GPUs: whole GPUs by index
        return ()


def devices_with_nvidia_smi(listing: Callable[[], str | None] = gpu_listing) -> tuple[str, ...]:
    """The machine's CUDA devices by `nvidia-smi -L` where a GPU lists MIG instances, else ()."""
    out = listing()
    return mig_devices([g.mig_uuids or None for g in parse_gpu_list(out)]) if out else ()


def count_with_torch_subprocess(run: Run = subprocess.run,
                                environ: Mapping[str, str] | None = None) -> int | None:
    """torch.cuda.device_count() in a child process; None when it fails."""
    answer = ask_torch(TORCH_COUNT_PROBE, run, environ)
    return int(answer) if answer is not None and answer.isdigit() else None


def discover(nvml: Callable[[], int | None] = count_with_nvml,
             smi: Callable[[], int | None] = count_with_nvidia_smi,
             torch_probe: Callable[[], int | None] = count_with_torch_subprocess,
             device_nodes: Callable[[], bool] | None = None,
             devices: Mapping[str, Callable[[], tuple[str, ...]]] | None = None
             ) -> GpuDiscovery:
    """The first method that answers: nvidia-ml-py, nvidia-smi, then torch in a subprocess
    (skipped when the machine has no GPU device node at all, which costs nothing to see). The
    tool that counted the GPUs lists their MIG instances (`devices`, by method name)."""
    listers = {"nvidia-ml-py": devices_with_nvml, "nvidia-smi": devices_with_nvidia_smi,
               **(devices or {})}
    for method, probe in (("nvidia-ml-py", nvml), ("nvidia-smi", smi)):
        found = probe()
        if found is not None:
            return GpuDiscovery(found, method, devices=listers[method]() if found else ())
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


def cuda_devices() -> list[str]:
    """What CUDA_VISIBLE_DEVICES may name on this machine, one entry per device a process can
    be given: each MIG instance of a split GPU by its UUID, each whole GPU by its index."""
    found = discovery()
    return list(found.devices) or [str(i) for i in range(found.count)]


def enumerated(entries: Sequence[str], physical: int) -> int:
    """The CUDA devices a process sees among `entries`: whole GPUs (at most the machine's),
    and one MIG instance at most ("a single CUDA process can only enumerate a single MIG
    device", NVIDIA's MIG user guide)."""
    whole = [e for e in entries if not e.startswith("MIG-")]
    return min(len(whole), physical) + min(1, len(entries) - len(whole))


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
    return enumerated(cuda_devices() if entries is None else entries, physical)


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
