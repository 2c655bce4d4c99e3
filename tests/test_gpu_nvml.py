"""One GPU through NVML, with a fake nvidia-ml-py: finding a torch device's handle by UUID (a
whole GPU, a MIG instance and the GPU it is part of) and reading the SM clock against the
GPU's default clock, every NVML call guarded."""

from __future__ import annotations

import pytest
from hpml_testing import run_with_json

from pytest_hpml.machine.nvml import SmClock, nvml_lookup

UUID = "5d1c2b7e-0000-4000-8000-00000000a100"  # as torch prints it: no "GPU-" / "MIG-" prefix


class NotFound(Exception):
    pass


class FakeNvml:
    """A machine with one H100 whose first MIG instance is the device torch sees."""

    NVML_CLOCK_SM = 1

    def __init__(self, devices: dict[str, str], mig_parent: dict[str, str] | None = None,
                 application_clocks: bool = True) -> None:
        self.devices = devices  # NVML UUID -> handle
        self.mig_parent = mig_parent or {}  # MIG handle -> GPU handle
        self.application_clocks = application_clocks
        self.clock_reads: list[str] = []

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:
        if uuid not in self.devices:
            raise NotFound(f"NVML_ERROR_NOT_FOUND: {uuid}")
        return self.devices[uuid]

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:
        return list(self.devices.values())[index]

    def nvmlDeviceIsMigDeviceHandle(self, handle: str) -> bool:
        return handle in self.mig_parent

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle: str) -> str:
        return self.mig_parent[handle]

    def nvmlDeviceGetDefaultApplicationsClock(self, handle: str, kind: int) -> int:
        if not self.application_clocks:
            raise NotFound("NVML_ERROR_NOT_SUPPORTED")
        return 1755

    def nvmlDeviceGetMaxClockInfo(self, handle: str, kind: int) -> int:
        return 1980

    def nvmlDeviceGetClockInfo(self, handle: str, kind: int) -> int:
        if handle in self.mig_parent:
            raise NotFound("NVML_ERROR_NOT_SUPPORTED: a MIG instance has no clock of its own")
        self.clock_reads.append(handle)
        return 1650


def test_a_whole_gpu_is_found_by_its_gpu_uuid() -> None:
    nvml = FakeNvml({f"GPU-{UUID}": "gpu0"})
    assert nvml_lookup(nvml, UUID, 0) == ("gpu0", "gpu0")
    assert nvml_lookup(nvml, f"GPU-{UUID}", 0) == ("gpu0", "gpu0")  # already prefixed


def test_a_mig_instance_is_found_by_its_mig_uuid_and_brings_its_gpu() -> None:
    # torch's UUID of a MIG device is the instance's: NVML knows it as "MIG-...", never as
    # "GPU-..." (the lookup used to try only that, and found nothing).
    nvml = FakeNvml({"GPU-ffff": "gpu0", f"MIG-{UUID}": "mig0"}, mig_parent={"mig0": "gpu0"})
    assert nvml_lookup(nvml, UUID, 0) == ("mig0", "gpu0")
    # The clock is read from the GPU the instance is part of (the instance has none).
    reader = SmClock(nvml, nvml_lookup(nvml, UUID, 0)[1])
    assert reader() == (1650.0, 1755.0) and nvml.clock_reads == ["gpu0"]


def test_an_unknown_uuid_names_what_was_tried() -> None:
    with pytest.raises(LookupError, match=f"GPU-{UUID} or MIG-{UUID}"):
        nvml_lookup(FakeNvml({}), UUID, 0)


def test_the_clock_is_judged_against_the_default_clock_else_the_maximum() -> None:
    assert SmClock(FakeNvml({}), "gpu0")() == (1650.0, 1755.0)
    assert SmClock(FakeNvml({}, application_clocks=False), "gpu0")() == (1650.0, 1980.0)


def test_an_nvml_error_turns_the_reading_off_and_is_told_once() -> None:
    nvml = FakeNvml({"MIG-x": "mig0"}, mig_parent={"mig0": "gpu0"})
    reader = SmClock(nvml, "mig0")  # the instance's handle: NVML refuses its clock
    assert reader() is None and reader() is None
    assert "NVML_ERROR_NOT_SUPPORTED" in reader.take_problem()
    assert reader.take_problem() is None
    missing = SmClock(None, None, problem="nvidia-ml-py is not installed")
    assert missing() is None and missing.take_problem() == "nvidia-ml-py is not installed"


# -- a device's handle, its utilization, its MIG instances (hpml_testing.NvmlMachine) -------------

def test_a_failed_lookup_shuts_nvml_down_again() -> None:
    from hpml_testing import NvmlMachine

    from pytest_hpml.machine.nvml import nvml_device

    machine = NvmlMachine({"GPU-a": []})
    found = nvml_device("cuda:0", module=lambda: machine, identify=lambda d: (0, "ffff"))
    assert found.startswith("NVML found no handle for cuda:0 (LookupError: NVML has no device "
                            "with UUID GPU-ffff or MIG-ffff)")
    assert machine.starts == machine.shutdowns == 1  # NVML counts its starts
    broken = NvmlMachine({}, start_fails=True)
    assert nvml_device("cuda", module=lambda: broken, identify=lambda d: 1 / 0) == (
        "NVML did not start (NvmlNotFound: NVML_ERROR_DRIVER_NOT_LOADED)")
    assert broken.shutdowns == 0  # nothing started, nothing to shut down
    assert nvml_device("cuda", module=lambda: None).startswith("nvidia-ml-py is not installed")
    # Found: NVML stays started for the handles' life, the caller's to shut down.
    assert nvml_device("cuda:0", module=lambda: machine, identify=lambda d: (0, "a")) == (
        machine, "GPU-a", "GPU-a")
    assert machine.starts - machine.shutdowns == 1


def test_a_whole_gpu_gives_every_series() -> None:
    from hpml_testing import NvmlMachine

    from pytest_hpml.measure.utilization import NvmlSource

    machine = NvmlMachine({"GPU-a": []})
    source = NvmlSource("GPU-a", machine)
    assert [s.name for s in source.series] == ["gpu_util", "gpu_memory_util", "gpu_memory_used",
                                                "sm_clock"]
    assert source.read() == (87.0, 41.0, 10 * 2**30, 1650e6) and source.unread == []


def test_a_mig_instance_gives_its_memory_and_its_gpus_clock_and_says_what_it_cannot() -> None:
    # NVML gives no utilization for a MIG instance and no clock of its own: the whole source
    # used to be dropped at its first reading, memory and clock with it.
    from hpml_testing import NvmlMachine

    from pytest_hpml.measure.utilization import NvmlSource

    machine = NvmlMachine({"GPU-a": ["MIG-a1", "MIG-a2"]})
    machine.starts = 1  # as nvml_device leaves it
    source = NvmlSource("MIG-a1", machine, gpu="GPU-a")
    assert [s.name for s in source.series] == ["gpu_memory_used", "sm_clock"]
    assert source.read() == (3 * 2**30, 1650e6)  # the instance's 3 GiB, the GPU's clock
    assert source.unread == ["gpu_util, gpu_memory_util not sampled (NvmlNotFound: "
                             "NVML_ERROR_NOT_SUPPORTED: utilization of a MIG instance)"]
    source.close()
    source.close()
    assert machine.shutdowns == 1


def test_split_gpus_are_listed_by_their_instances_by_nvml_and_by_nvidia_smi() -> None:
    from hpml_testing import NvmlMachine

    from pytest_hpml.machine import gpus

    machine = NvmlMachine({"GPU-a": ["MIG-a1", "MIG-a2"], "GPU-b": []})
    assert gpus.devices_with_nvml(lambda: machine) == ("MIG-a1", "MIG-a2", "1")
    assert machine.starts == machine.shutdowns == 1
    assert gpus.devices_with_nvml(lambda: NvmlMachine({"GPU-a": [], "GPU-b": []})) == ()
    listing = ("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-a)\n"
               "  MIG 3g.40gb     Device  0: (UUID: MIG-a1)\n"
               "  MIG 3g.40gb     Device  1: (UUID: MIG-a2)\n"
               "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-b)\n")
    assert gpus.devices_with_nvidia_smi(lambda: listing) == ("MIG-a1", "MIG-a2", "1")
    found = gpus.discover(nvml=lambda: 2, devices={"nvidia-ml-py": lambda: ("MIG-a1", "1")})
    assert found.devices == ("MIG-a1", "1")
    assert gpus.GpuDiscovery.decode(found.encode()) == found


def test_xdist_workers_are_pinned_to_mig_instances(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hpml import devices
    from pytest_hpml.machine import gpus

    split = gpus.GpuDiscovery(1, "nvidia-ml-py", devices=("MIG-a1", "MIG-a2"))
    monkeypatch.setattr(gpus, "discovery", lambda: split)
    pinned = [devices.pin_worker_to_gpu(f"gw{n}", {}) for n in range(3)]
    assert pinned == ["MIG-a1", "MIG-a2", "MIG-a1"]
    # One GPU, two instances: a process sees one device, pinned or not.
    assert gpus.visible_gpu_count({}) == 1
    assert gpus.visible_gpu_count({"CUDA_VISIBLE_DEVICES": "MIG-a2"}) == 1
    assert gpus.enumerated(["0", "MIG-a1", "MIG-a2"], physical=2) == 2


MIG_PINNING_TEST = '''
import os


def test_where_am_i(worker_id, tmp_path_factory):
    folder = tmp_path_factory.getbasetemp().parent
    (folder / worker_id).write_text(os.environ.get("CUDA_VISIBLE_DEVICES", "unset"))
'''


def test_a_worker_per_mig_instance_in_a_user_project(pytester: pytest.Pytester,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # One GPU split in two: the two workers get an instance each, never both the GPU "0".
    from pytest_hpml.machine.gpus import DISCOVERY_ENV

    monkeypatch.setenv(DISCOVERY_ENV, "1|1|MIG-a1,MIG-a2|nvidia-ml-py")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    pytester.makepyfile(test_user=MIG_PINNING_TEST)
    base = pytester.path / "base"
    # --dist each: every worker runs the test, so each says where it was pinned.
    result = pytester.runpytest("-n", "2", "--dist", "each", "-p", "no:cacheprovider",
                                "--hpml-profile=quick", f"--basetemp={base}", "test_user.py")
    result.assert_outcomes(passed=2)
    assert {p.name: p.read_text() for p in base.glob("gw*")} == {"gw0": "MIG-a1",
                                                                  "gw1": "MIG-a2"}


NVML_CONFTEST = '''
import sys
import types

import pytest
import torch
from hpml_testing import NvmlMachine

MACHINE = NvmlMachine({"GPU-a": ["MIG-a1", "MIG-a2"]})


@pytest.fixture(autouse=True)
def fake_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", MACHINE)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


@pytest.fixture
def torch_uuid(monkeypatch):
    def device_has(uuid):  # the UUID torch gives the CUDA device, without NVML's prefix
        monkeypatch.setattr(torch.cuda, "get_device_properties",
                            lambda index: types.SimpleNamespace(uuid=uuid))
    return device_has
'''

NVML_TEST = '''
import time

import pytest
from conftest import MACHINE


def sample(hpml):
    with hpml.sample_utilization(interval=0.01) as sampler:
        deadline = time.monotonic() + 60
        while len(sampler.times) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    assert MACHINE.starts == MACHINE.shutdowns  # every NVML start shut down again


@pytest.mark.parametrize("device", ["cuda"])
def test_on_a_mig_instance(hpml, device, torch_uuid):
    torch_uuid("a1")
    sample(hpml)


@pytest.mark.parametrize("device", ["cuda"])
def test_on_a_device_nvml_does_not_know(hpml, device, torch_uuid):
    torch_uuid("ffff")
    sample(hpml)
'''


def test_utilization_on_a_mig_instance_in_a_user_project(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(NVML_CONFTEST)
    pytester.makepyfile(test_user=NVML_TEST)
    result, document = run_with_json(pytester)
    result.assert_outcomes(passed=2)
    records = {r["id"].split("::")[1]: r for r in document["records"]}
    mig = records["test_on_a_mig_instance[cuda]"]
    names = {m["name"]: m for m in mig["metrics"]}
    assert names["gpu_memory_used"]["value"] == 3 * 2**30  # the instance's memory
    assert names["sm_clock"]["value"] == 1650e6  # its GPU's clock
    assert "gpu_util" not in names and "cpu_util" in names
    assert any("gpu_util, gpu_memory_util not sampled" in w for w in mig["warnings"])
    unknown = records["test_on_a_device_nvml_does_not_know[cuda]"]
    assert any(w.startswith("utilization: GPU not sampled: NVML found no handle for cuda")
               for w in unknown["warnings"]), unknown["warnings"]
