"""One GPU through NVML, with a fake nvidia-ml-py: finding a torch device's handle by UUID (a
whole GPU, a MIG instance and the GPU it is part of) and reading the SM clock against the
GPU's default clock, every NVML call guarded."""

from __future__ import annotations

import pytest

from pytest_hpml.machine.gpus import SmClock, nvml_lookup

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
