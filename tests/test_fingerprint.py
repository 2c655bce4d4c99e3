"""Machine identity: the key of a baseline file, and software versions as changes; the GPU
model, count and driver read from nvidia-smi and nvidia-ml-py output (recorded outputs and a
fake NVML module), never by initializing CUDA or importing triton in this process."""

from __future__ import annotations

import os
import platform
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

from pytest_hpml.machine import fingerprint as fp
from pytest_hpml.machine import gpus as gpu_tools
from pytest_hpml.machine.fingerprint import fingerprint, machine_key, slugify, software_changes
from pytest_hpml.machine.gpus import (
    GpuDiscovery,
    nvml_facts,
    parse_driver_version,
    parse_gpu_list,
)

# Outputs of `nvidia-smi -L` and `nvidia-smi --query-gpu=driver_version --format=csv,noheader`
# (and of nvidia-smi without a working driver). No GPU was available to record them: they are
# written in the format NVIDIA documents for these commands (nvidia-smi(1)), UUIDs made up.
FIXTURES = Path(__file__).with_name("fixtures")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text(encoding="utf-8")


def test_gpu_machines_are_keyed_by_gpu_model_and_count() -> None:
    facts = {"gpu": "NVIDIA H100 80GB HBM3", "gpu_count": 8, "cpu": "AMD EPYC 9654 96-Core",
             "cpu_cores": 192}
    assert machine_key(facts) == "nvidia-h100-80gb-hbm3-x8"
    assert machine_key({**facts, "gpu_count": 0}) == "nvidia-h100-80gb-hbm3-x1"


def test_cpu_machines_are_keyed_by_cpu_model_and_cores() -> None:
    facts = {"gpu": None, "cpu": "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "cpu_cores": 2}
    assert machine_key(facts) == "intel-xeon-platinum-8481c-x2cores"


def test_software_versions_are_not_part_of_the_key() -> None:
    old = {"gpu": "NVIDIA A100-SXM4-40GB", "gpu_count": 1, "torch": "2.4.0", "driver": "550.54"}
    new = {**old, "torch": "2.5.1", "driver": "560.35"}
    assert machine_key(old) == machine_key(new)
    assert software_changes(old, new) == ["driver 550.54 -> 560.35", "torch 2.4.0 -> 2.5.1"]
    assert software_changes(old, dict(old)) == []


def test_slugify_keeps_names_file_safe() -> None:
    assert slugify("Tesla V100-SXM2-16GB") == "tesla-v100-sxm2-16gb"
    assert slugify("???") == "unknown"


def test_this_machines_fingerprint_reports_its_own_cores_and_versions() -> None:
    facts = fingerprint.__wrapped__()  # taken now, not a copy cached by an earlier test
    assert facts["cpu_cores"] == os.cpu_count()
    assert facts["python"] == platform.python_version()
    assert facts["torch"] == torch.__version__ and facts["cuda"] == torch.version.cuda
    try:  # read from the package's metadata, without importing triton
        triton = metadata.version("triton")
    except metadata.PackageNotFoundError:
        triton = None
    assert facts["triton"] == triton
    # A machine without a GPU is keyed by its CPU and cores, the same key on every run.
    key = machine_key(facts)
    if not facts["gpu"]:
        assert key.endswith(f"-x{os.cpu_count()}cores") and facts["gpu_count"] == 0
    assert key == machine_key(fingerprint.__wrapped__()) and re.fullmatch(r"[a-z0-9-]+", key)


# -- nvidia-smi's output ---------------------------------------------------------------------------

def test_driver_version_is_read_from_the_csv_query() -> None:
    assert parse_driver_version(fixture("nvidia-smi-driver-version-2gpu.txt")) == "570.124.06"
    assert parse_driver_version("\n  535.54.03  \n") == "535.54.03"


@pytest.mark.parametrize("stdout", ["", "\n", "[N/A]\n", "nvidia-smi-no-driver.txt"])
def test_anything_but_a_version_is_no_driver_version(stdout: str) -> None:
    text = fixture(stdout) if stdout.endswith(".txt") else stdout
    assert parse_driver_version(text) is None


def test_gpu_list_gives_every_gpu_by_name() -> None:
    text = fixture("nvidia-smi-L-a100x4.txt")
    gpus = parse_gpu_list(text)
    assert [g.index for g in gpus] == [0, 1, 2, 3]
    assert {g.model for g in gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert len(gpus) == gpu_tools.count_with_nvidia_smi(lambda: text)  # discovery's count


def test_a_mig_instance_is_named_as_cuda_names_it() -> None:
    # A MIG slice is a smaller device: its figures must not share the whole GPU's key.
    text = fixture("nvidia-smi-L-h100-mig.txt")
    gpu0, gpu1 = parse_gpu_list(text)
    assert gpu0.name == "NVIDIA H100 80GB HBM3" and gpu0.mig_profiles == ["3g.40gb", "3g.40gb"]
    assert gpu0.model == "NVIDIA H100 80GB HBM3 MIG 3g.40gb"
    assert gpu1.model == "NVIDIA H100 80GB HBM3" and gpu1.mig_profiles == []
    assert len(parse_gpu_list(text)) == gpu_tools.count_with_nvidia_smi(lambda: text)
    assert parse_gpu_list(fixture("nvidia-smi-no-driver.txt")) == []


# -- nvidia-ml-py --------------------------------------------------------------------------------

class FakeNvml:
    """The nvidia-ml-py calls fingerprint makes; `as_bytes` as versions before 11.515 return."""

    def __init__(self, names: list[str], driver: str, as_bytes: bool = False,
                 fail_on: str | None = None) -> None:
        self.names, self.driver, self.as_bytes, self.fail_on = names, driver, as_bytes, fail_on
        self.log: list[str] = []

    def _out(self, text: str):
        return text.encode() if self.as_bytes else text

    def _call(self, name: str) -> None:
        self.log.append(name)
        if name == self.fail_on:
            raise RuntimeError(f"NVMLError in {name}")

    def nvmlInit(self) -> None:
        self._call("init")

    def nvmlShutdown(self) -> None:
        self._call("shutdown")

    def nvmlDeviceGetCount(self) -> int:
        self._call("count")
        return len(self.names)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        return ("handle", index)

    def nvmlDeviceGetName(self, handle) -> str | bytes:
        self._call("name")
        return self._out(self.names[handle[1]])

    def nvmlSystemGetDriverVersion(self) -> str | bytes:
        self._call("driver")
        return self._out(self.driver)


@pytest.mark.parametrize("as_bytes", [False, True], ids=["str", "bytes"])
def test_nvml_names_and_driver(as_bytes: bool) -> None:
    nvml = FakeNvml(["NVIDIA L4", "NVIDIA L4"], "550.90.07", as_bytes=as_bytes)
    assert nvml_facts(nvml) == (["NVIDIA L4", "NVIDIA L4"], "550.90.07")
    assert nvml.log[0] == "init" and nvml.log[-1] == "shutdown"


def test_nvml_is_shut_down_when_a_query_fails() -> None:
    nvml = FakeNvml(["NVIDIA L4"], "550.90.07", fail_on="driver")
    with pytest.raises(RuntimeError, match="NVMLError"):
        nvml_facts(nvml)
    assert nvml.log[-1] == "shutdown"


# -- which tool says what ------------------------------------------------------------------------

def fake_smi(outputs: dict[str, str | None]):
    """nvidia-smi by its first argument; a missing key is a tool that must not be asked."""
    def run(args):
        return outputs[args[0]]
    return run


def never(*args):
    raise AssertionError("this source must not be asked")


SMI = {"-L": fixture("nvidia-smi-L-h100-mig.txt"),
       "--query-gpu=driver_version": fixture("nvidia-smi-driver-version-2gpu.txt")}


def test_nvidia_smi_names_the_gpu_and_its_driver_without_nvml() -> None:
    facts = fp._gpu_facts(count=lambda: 2, smi=fake_smi(SMI), nvml=lambda: None,
                          torch_name=never)
    assert (facts["gpu"], facts["gpu_count"], facts["driver"]) == (
        "NVIDIA H100 80GB HBM3 MIG 3g.40gb", 2, "570.124.06")
    assert facts["cuda"] == torch.version.cuda


def test_nvml_gives_the_driver_and_nvidia_smi_the_name() -> None:
    nvml = FakeNvml(["NVIDIA H100 80GB HBM3"] * 2, "575.51.03", as_bytes=True)
    facts = fp._gpu_facts(count=lambda: 2, smi=fake_smi({"-L": SMI["-L"]}),
                          nvml=lambda: nvml, torch_name=never)
    assert (facts["gpu"], facts["driver"]) == ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "575.51.03")


def test_nvml_alone_names_the_gpu() -> None:
    nvml = FakeNvml(["NVIDIA A10G"], "535.183.01")
    facts = fp._gpu_facts(count=lambda: 1, smi=lambda args: None, nvml=lambda: nvml,
                          torch_name=never)
    assert (facts["gpu"], facts["driver"]) == ("NVIDIA A10G", "535.183.01")


def test_a_broken_nvml_falls_back_to_nvidia_smi() -> None:
    nvml = FakeNvml(["NVIDIA A10G"], "535.183.01", fail_on="init")
    facts = fp._gpu_facts(count=lambda: 2, smi=fake_smi(SMI), nvml=lambda: nvml,
                          torch_name=never)
    assert (facts["gpu"], facts["driver"]) == ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", "570.124.06")


def test_torch_in_a_subprocess_names_the_gpu_when_no_tool_is_installed() -> None:
    facts = fp._gpu_facts(count=lambda: 1, smi=lambda args: None, nvml=lambda: None,
                          torch_name=lambda: "NVIDIA GH200 480GB")
    assert (facts["gpu"], facts["gpu_count"], facts["driver"]) == ("NVIDIA GH200 480GB", 1, None)
    unnamed = fp._gpu_facts(count=lambda: 1, smi=lambda args: None, nvml=lambda: None,
                            torch_name=lambda: None)
    assert machine_key({**unnamed, "cpu": "AMD EPYC"}) == "unknown-gpu-x1"  # not a CPU key


def test_no_gpu_asks_no_gpu_tool() -> None:
    facts = fp._gpu_facts(count=lambda: 0, smi=never, nvml=never, torch_name=never)
    assert (facts["gpu"], facts["gpu_count"], facts["driver"]) == (None, 0, None)


def test_torch_name_probe_reads_the_last_line_of_the_machines_gpu_0(monkeypatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    seen: dict = {}

    def run(cmd, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, "a torch warning\nNVIDIA H200\n", "")

    assert gpu_tools.ask_torch(gpu_tools.TORCH_NAME_PROBE, run) == "NVIDIA H200"
    assert "CUDA_VISIBLE_DEVICES" not in seen

    def fails(cmd, **kwargs):
        return subprocess.CompletedProcess(cmd, 1, "RuntimeError: no CUDA GPUs\n", "")

    assert gpu_tools.ask_torch(gpu_tools.TORCH_NAME_PROBE, fails) is None


def test_fingerprint_neither_initializes_cuda_nor_imports_triton(monkeypatch) -> None:
    # It runs at pytest_configure, before an xdist worker pins its GPU (CUDA_VISIBLE_DEVICES is
    # read once, when CUDA starts) and before Triton's interpreter is switched on (an imported
    # triton has its helpers decorated for the GPU already). Any CUDA query fails this test.
    touched: list[str] = []
    for name in ("is_available", "device_count", "get_device_name", "get_device_properties",
                 "init", "_lazy_init", "current_device"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, _n=name, **k: touched.append(_n))
    monkeypatch.setitem(sys.modules, "triton", None)  # `import triton` would now raise
    monkeypatch.setattr(gpu_tools, "discovery", lambda: GpuDiscovery(2, "test"))
    monkeypatch.setattr(gpu_tools, "gpu_listing", lambda: SMI["-L"])
    monkeypatch.setattr(gpu_tools, "nvidia_smi", fake_smi(SMI))
    monkeypatch.setattr(gpu_tools, "nvml_module", lambda: None)
    facts = fingerprint.__wrapped__()
    assert touched == []
    assert (facts["gpu"], facts["gpu_count"]) == ("NVIDIA H100 80GB HBM3 MIG 3g.40gb", 2)
    assert facts["triton"] == metadata.version("triton")
    assert facts["torch"] == torch.__version__


def test_the_cuda_torch_was_built_with_is_read_without_importing_torch(tmp_path) -> None:
    # A suite that never imports torch (a JSON library's) paid 2.7 s at the start of every
    # save and compare to name its machine. A torch whose import fails proves it is not
    # imported: its version.py is read as data.
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise RuntimeError('torch was imported')\n")
    (fake / "version.py").write_text("from typing import Optional\n__version__ = '9.9.9'\n"
                                     "cuda: Optional[str] = '12.4'\nhip = None\n")
    probe = ("import sys\nfrom pytest_hpml.machine.fingerprint import fingerprint\n"
             "facts = fingerprint()\nprint(facts['cuda'], 'torch' in sys.modules)\n")
    environ = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          env=environ, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["12.4", "False"]


def test_the_cuda_torch_was_built_with_is_torch_versions_once_imported() -> None:
    assert fp.torch_cuda() == torch.version.cuda
    assert fp.torch_cuda({}) == torch.version.cuda
