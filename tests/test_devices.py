"""GPU discovery without the driver's tools, one GPU per xdist worker (within an existing
CUDA_VISIBLE_DEVICES), and Triton's interpreter only where no GPU can be present; all on fake
environments and recorded tool outputs."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from pytest_hpml import devices
from pytest_hpml.machine import gpus
from pytest_hpml.machine.gpus import GpuDiscovery

FIXTURES = Path(__file__).with_name("fixtures")


@pytest.fixture
def machine_gpus(monkeypatch: pytest.MonkeyPatch):
    def set_found(n: int, conclusive: bool = True) -> None:
        found = GpuDiscovery(n, "test", conclusive)
        monkeypatch.setattr(gpus, "discovery", lambda: found)
    return set_found


# -- discovery ------------------------------------------------------------------------------------

def _none() -> None:
    return None


def test_nvml_answers_first() -> None:
    found = gpus.discover(nvml=lambda: 8, smi=lambda: 1 / 0, torch_probe=lambda: 1 / 0)
    assert (found.count, found.method, found.conclusive) == (8, "nvidia-ml-py", True)


def test_nvidia_smi_when_nvml_is_not_installed() -> None:
    found = gpus.discover(nvml=_none, smi=lambda: 4, torch_probe=lambda: 1 / 0)
    assert (found.count, found.method) == (4, "nvidia-smi")


def test_torch_in_a_subprocess_when_neither_tool_is_there() -> None:
    # A container started with only the compute capability: device nodes, no nvidia-smi.
    found = gpus.discover(nvml=_none, smi=_none, torch_probe=lambda: 2,
                             device_nodes=lambda: True)
    assert found.count == 2 and "torch in a subprocess" in found.method and found.conclusive


def test_no_device_node_means_no_gpu_without_starting_torch() -> None:
    found = gpus.discover(nvml=_none, smi=_none, torch_probe=lambda: 1 / 0,
                             device_nodes=lambda: False)
    assert (found.count, found.conclusive) == (0, True)
    assert "no GPU device node" in found.method


def test_a_failing_probe_is_inconclusive_and_never_forces_the_interpreter(machine_gpus) -> None:
    found = gpus.discover(nvml=_none, smi=_none, torch_probe=_none, device_nodes=lambda: True)
    assert (found.count, found.conclusive) == (0, False)
    machine_gpus(0, conclusive=False)
    environ: dict[str, str] = {}
    assert devices.enable_triton_interpreter_without_gpu(environ) is False
    assert environ == {}


def test_the_finding_travels_to_workers_through_the_environment() -> None:
    found = GpuDiscovery(3, "torch in a subprocess (no nvidia-ml-py, no nvidia-smi)")
    assert GpuDiscovery.decode(found.encode()) == found
    assert GpuDiscovery.decode("") is None and GpuDiscovery.decode("x|y") is None


def test_torch_probe_counts_the_machine_not_the_visible_list() -> None:
    seen = {}

    def run(cmd, **kwargs):
        seen.update(kwargs["env"])
        return subprocess.CompletedProcess(cmd, 0, stdout="warning: something\n4\n", stderr="")

    assert gpus.count_with_torch_subprocess(run, {"CUDA_VISIBLE_DEVICES": "1", "A": "b"}) == 4
    assert "CUDA_VISIBLE_DEVICES" not in seen and seen["A"] == "b"


@pytest.mark.parametrize("outcome", [
    subprocess.CompletedProcess([], 1, stdout="", stderr="ImportError"),
    subprocess.CompletedProcess([], 0, stdout="not a number\n", stderr=""),
    subprocess.TimeoutExpired("python", 120),
])
def test_torch_probe_failures_are_none(outcome) -> None:
    def run(cmd, **kwargs):
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert gpus.count_with_torch_subprocess(run, {}) is None


def test_nvidia_smi_output_counts_gpus_not_mig_slices() -> None:
    listing = (FIXTURES / "nvidia-smi-L-h100-mig.txt").read_text()
    assert gpus.count_with_nvidia_smi(lambda: listing) == 2
    assert gpus.count_with_nvidia_smi(lambda: "") == 0
    assert gpus.count_with_nvidia_smi(lambda: None) is None  # no nvidia-smi: ask the next tool


# -- CUDA_VISIBLE_DEVICES as CUDA reads it ---------------------------------------------------------

@pytest.mark.parametrize("visible, physical, entries", [
    (None, 4, None),
    ("1,2", 4, ["1", "2"]),
    ("", 4, []),
    ("-1", 4, []),
    ("0,-1,1", 4, ["0"]),  # CUDA stops at the first invalid entry
    ("0,7,1", 2, ["0"]),  # an index past the last GPU is invalid
    ("0,1,2", 2, ["0", "1"]),
    (" 3 , 1", 4, ["3", "1"]),
    ("GPU-8f6a3b1e-0000-1111-2222-333344445555,1", 2,
     ["GPU-8f6a3b1e-0000-1111-2222-333344445555", "1"]),
])
def test_visible_entries_are_read_as_cuda_reads_them(visible, physical, entries) -> None:
    assert gpus.visible_entries(visible, physical) == entries


@pytest.mark.parametrize("visible, physical, count", [
    (None, 4, 4), ("1,2", 4, 2), ("", 4, 0), ("-1", 4, 0), ("0,1,2", 2, 2), ("0", 0, 0),
    ("0,-1,1", 4, 1),
])
def test_visible_gpu_count(machine_gpus, visible, physical, count) -> None:
    machine_gpus(physical)
    environ = {} if visible is None else {"CUDA_VISIBLE_DEVICES": visible}
    assert gpus.visible_gpu_count(environ) == count


# -- one GPU per xdist worker ----------------------------------------------------------------------

@pytest.mark.parametrize("worker, count, expected", [
    ("gw0", 4, "0"), ("gw3", 4, "3"), ("gw3", 2, "1"), ("gw5", 3, "2"), ("gw0", 1, "0"),
])
def test_workers_get_gpus_round_robin(machine_gpus, worker: str, count: int, expected: str) -> None:
    machine_gpus(count)
    environ: dict[str, str] = {}
    assert devices.pin_worker_to_gpu(worker, environ) == expected
    assert environ == {"CUDA_VISIBLE_DEVICES": expected}


@pytest.mark.parametrize("worker, expected", [("gw0", "5"), ("gw1", "6"), ("gw2", "5")])
def test_workers_share_out_an_existing_visible_list(machine_gpus, worker: str,
                                                    expected: str) -> None:
    # SLURM's --gres=gpu:2 job on an 8-GPU node: the job may use GPUs 5 and 6 only.
    machine_gpus(8)
    environ = {"CUDA_VISIBLE_DEVICES": "5,6"}
    assert devices.pin_worker_to_gpu(worker, environ) == expected
    assert environ == {"CUDA_VISIBLE_DEVICES": expected}


def test_a_list_that_hides_every_gpu_is_left_alone(machine_gpus) -> None:
    machine_gpus(4)
    environ = {"CUDA_VISIBLE_DEVICES": "-1"}
    assert devices.pin_worker_to_gpu("gw1", environ) is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "-1"}


@pytest.mark.parametrize("worker", [None, "", "master", "gwx"])
def test_not_an_xdist_worker_is_not_pinned(machine_gpus, worker) -> None:
    machine_gpus(2)
    environ: dict[str, str] = {}
    assert devices.pin_worker_to_gpu(worker, environ) is None
    assert environ == {}


def test_no_gpu_no_pinning(machine_gpus) -> None:
    machine_gpus(0)
    environ: dict[str, str] = {}
    assert devices.pin_worker_to_gpu("gw0", environ) is None
    assert environ == {}


# -- Triton's interpreter -------------------------------------------------------------------------

def test_triton_interpreter_without_gpu(machine_gpus) -> None:
    machine_gpus(0)
    environ: dict[str, str] = {}
    assert devices.enable_triton_interpreter_without_gpu(environ) is True
    assert environ == {"TRITON_INTERPRET": "1"}


def test_triton_compiles_with_a_gpu(machine_gpus) -> None:
    machine_gpus(1)
    environ: dict[str, str] = {}
    assert devices.enable_triton_interpreter_without_gpu(environ) is False
    assert environ == {}


def test_the_users_triton_interpret_wins(machine_gpus) -> None:
    machine_gpus(0)
    environ = {"TRITON_INTERPRET": "0"}
    assert devices.enable_triton_interpreter_without_gpu(environ) is False
    assert environ == {"TRITON_INTERPRET": "0"}


@pytest.mark.parametrize("value, interpreted", [("1", True), ("0", False), ("", False),
                                                (None, False)])
def test_triton_interpreted(monkeypatch: pytest.MonkeyPatch, value, interpreted) -> None:
    if value is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", value)
    assert devices.triton_interpreted() is interpreted


# -- through pytest -------------------------------------------------------------------------------

def test_header_says_how_gpus_were_found_and_interpreter_is_set_before_imports(
        pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import os
        from pytest_hpml.machine import gpus

        INTERPRET_AT_IMPORT = os.environ.get("TRITON_INTERPRET")

        def test_env():
            if gpus.physical_gpu_count() == 0:
                assert INTERPRET_AT_IMPORT not in (None, "", "0")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "--hpml-profile=quick")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hpml: profile *", "hpml: GPUs: * found by *; visible to this "
                                 "run: *"])


def test_header_warns_when_xdist_workers_share_a_gpu(pytester: pytest.Pytester,
                                                     machine_gpus) -> None:
    machine_gpus(1)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--hpml-profile=quick", "-p", "xdist", "-n", "2")
    result.stdout.fnmatch_lines(["*2 xdist workers share 1 GPU(s)*use -n 1 for figures*"])
    alone = pytester.runpytest("--hpml-profile=quick")
    assert "xdist workers share" not in alone.stdout.str()


@pytest.mark.parametrize("mark", ["multi_gpu('two')", "multi_gpu()", "multi_gpu(0)",
                                  "multi_gpu(2, 3)"])
def test_a_malformed_multi_gpu_marker_is_a_one_line_error(pytester: pytest.Pytester,
                                                          mark: str) -> None:
    pytester.makepyfile(f"import pytest\n\n@pytest.mark.{mark}\ndef test_x():\n    pass\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *test_x: @pytest.mark.multi_gpu takes one positive int*"])
    assert "Traceback" not in result.stderr.str() + result.stdout.str()
