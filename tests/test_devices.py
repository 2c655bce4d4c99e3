"""One GPU per xdist worker and Triton's interpreter without a GPU, on fake environments."""

from __future__ import annotations

import pytest

from pytest_hpml import devices


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    def set_count(n: int) -> None:
        monkeypatch.setattr(devices, "physical_gpu_count", lambda: n)
    return set_count


@pytest.mark.parametrize("worker, count, expected", [
    ("gw0", 4, "0"), ("gw3", 4, "3"), ("gw3", 2, "1"), ("gw5", 3, "2"), ("gw0", 1, "0"),
])
def test_workers_get_gpus_round_robin(gpus, worker: str, count: int, expected: str) -> None:
    gpus(count)
    environ: dict[str, str] = {}
    assert devices.pin_worker_to_gpu(worker, environ) == expected
    assert environ == {"CUDA_VISIBLE_DEVICES": expected}


def test_an_explicit_cuda_visible_devices_is_left_alone(gpus) -> None:
    gpus(8)
    environ = {"CUDA_VISIBLE_DEVICES": "5,6"}
    assert devices.pin_worker_to_gpu("gw1", environ) is None
    assert environ == {"CUDA_VISIBLE_DEVICES": "5,6"}


@pytest.mark.parametrize("worker", [None, "", "master", "gwx"])
def test_not_an_xdist_worker_is_not_pinned(gpus, worker) -> None:
    gpus(2)
    environ: dict[str, str] = {}
    assert devices.pin_worker_to_gpu(worker, environ) is None
    assert environ == {}


def test_no_gpu_no_pinning(gpus) -> None:
    gpus(0)
    environ: dict[str, str] = {}
    assert devices.pin_worker_to_gpu("gw0", environ) is None
    assert environ == {}


def test_triton_interpreter_without_gpu(gpus) -> None:
    gpus(0)
    environ: dict[str, str] = {}
    assert devices.enable_triton_interpreter_without_gpu(environ) is True
    assert environ == {"TRITON_INTERPRET": "1"}


def test_triton_compiles_with_a_gpu(gpus) -> None:
    gpus(1)
    environ: dict[str, str] = {}
    assert devices.enable_triton_interpreter_without_gpu(environ) is False
    assert environ == {}


def test_the_users_triton_interpret_wins(gpus) -> None:
    gpus(0)
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


@pytest.mark.parametrize("visible, physical, count", [
    (None, 4, 4), ("1,2", 4, 2), ("", 4, 0), ("-1", 4, 0), ("0,1,2", 2, 2), ("0", 0, 0),
])
def test_visible_gpu_count(monkeypatch: pytest.MonkeyPatch, gpus, visible, physical,
                           count) -> None:
    gpus(physical)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert devices.visible_gpu_count() == count


def test_workers_report_a_gpu_header_and_run_under_xdist(pytester: pytest.Pytester) -> None:
    # The real hook path: the header is printed and TRITON_INTERPRET is set before test modules
    # are imported when this machine has no GPU.
    pytester.makepyfile(
        """
        import os
        from pytest_hpml import devices

        INTERPRET_AT_IMPORT = os.environ.get("TRITON_INTERPRET")

        def test_env():
            if devices.physical_gpu_count() == 0:
                assert INTERPRET_AT_IMPORT not in (None, "", "0")
        """
    )
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["hpml: profile *, GPUs visible: *"])


def test_header_warns_when_xdist_workers_share_a_gpu(pytester: pytest.Pytester,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_hpml import devices

    monkeypatch.setattr(devices, "physical_gpu_count", lambda: 1)
    pytester.makepyfile("def test_nothing():\n    pass\n")
    result = pytester.runpytest("--hpml-profile=quick", "-p", "xdist", "-n", "2")
    result.stdout.fnmatch_lines(["*2 xdist workers share 1 GPU(s)*use -n 1 for figures*"])
    alone = pytester.runpytest("--hpml-profile=quick")
    assert "xdist workers share" not in alone.stdout.str()
