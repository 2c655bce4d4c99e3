"""The GPUs of a run: which GPUs it found (pytest_hpml.machine.gpus) in the header, one GPU
per xdist worker, Triton's interpreter without a GPU, and the skips of `gpu` / `multi_gpu(n)`
tests (a pytest plugin module).

Nothing here may initialize CUDA in this process before the tests run: CUDA_VISIBLE_DEVICES
only takes effect if it is set before the CUDA runtime starts, and xdist workers pin themselves
in pytest_configure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, MutableMapping

import pytest

from pytest_hpml.machine import gpus
from pytest_hpml.session import add_option, run_of, xdist_workers

NO_CUDA_REASON = "needs a CUDA GPU: none was found on this machine"


def pin_worker_to_gpu(worker_id: str | None,
                      environ: MutableMapping[str, str] | None = None) -> str | None:
    """Give xdist worker gwN one GPU, round-robin over the GPUs this run may use: those of an
    existing CUDA_VISIBLE_DEVICES (as SLURM sets for a --gres job), else all of them, a GPU
    split into MIG instances counting as its instances (by UUID: a process can use one).
    Returns the entry set, if any."""
    environ = os.environ if environ is None else environ
    match = re.fullmatch(r"gw(\d+)", worker_id or "")
    physical = gpus.physical_gpu_count()
    if not match or physical < 1:
        return None
    entries = gpus.visible_entries(environ.get("CUDA_VISIBLE_DEVICES"), physical)
    if entries is None:
        entries = gpus.cuda_devices()
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
    found = gpus.discovery()
    if "TRITON_INTERPRET" in environ or found.count > 0 or not found.conclusive:
        return False
    environ["TRITON_INTERPRET"] = "1"
    return True


#: Triton's floating-point fusion (a * b + c contracted into one FMA), decided for every kernel
#: a run compiles or interprets unless the user decided it (Triton 3.9 warns that its default,
#: on, turns off in 3.10). Off: the interpreter, where the labs' results are checked on a CPU,
#: never fuses, nor do torch's element-wise references, so a kernel compiled without fusion
#: computes on the GPU the arithmetic that was checked (the int8 GEMM's float epilogue bit for
#: bit), and its compiled resources do not change when Triton's default does. tl.dot is fused
#: either way (IEEE fp32 runs on FFMAs with fusion off: test_mlp_tiled_matmul_compiled).
TRITON_FP_FUSION = ("TRITON_DEFAULT_FP_FUSION", "0")


def decide_triton_fp_fusion(environ: MutableMapping[str, str] | None = None) -> bool:
    """Set Triton's default FP fusion (TRITON_FP_FUSION) for this process and its children
    where the user has not: before any kernel compiles, in the run's environment. Returns
    whether it was set here."""
    environ = os.environ if environ is None else environ
    name, value = TRITON_FP_FUSION
    if name in environ:
        return False
    environ[name] = value
    return True


def triton_interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


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


#: Asked in a child process, so this process's CUDA stays untouched before workers pin GPUs.
CUDA_PROBE = ("import torch; print(torch.cuda.is_available(), torch.version.cuda, "
              "torch.__version__)")


def missing_gpu(ask: Callable[[str], str | None] = gpus.ask_torch) -> str | None:
    """Why this run has no usable CUDA GPU, in words; None when it has one."""
    found = gpus.discovery()
    visible = gpus.visible_gpu_count()
    if visible == 0:
        hidden = f" (CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} hides them)" \
            if found.count and "CUDA_VISIBLE_DEVICES" in os.environ else ""
        return (f"{found.count} GPU(s) found by {found.method}{hidden}: this job needs a GPU "
                "runner")
    answer = (ask(CUDA_PROBE) or "").split()
    if answer[:1] == ["True"]:
        return None
    built = f" (torch {answer[2]}, built for CUDA {answer[1]})" if len(answer) == 3 else ""
    return (f"{visible} GPU(s) found by {found.method}, but torch cannot use them{built}: a "
            "CPU-only torch build, or a driver too old for it (nvidia-smi shows the driver's "
            "CUDA version)")


# -- pytest hooks -------------------------------------------------------------------------------

def pytest_addoption(parser: pytest.Parser) -> None:
    add_option(parser, "--hpml-require-gpu", pin=True, action="store_true",
               help="stop before the tests when no CUDA GPU is usable (CI on GPU runners: a "
                    "job that landed on a CPU runner, or a driver too old for torch, must not "
                    "pass by skipping every GPU test)")


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config) -> None:
    # The conftest.py files of the paths on the command line are imported before
    # pytest_configure: one that imports a Triton kernel must find the interpreter chosen.
    if run_of(early_config).used_because is None:
        return
    mode = getattr(early_config.known_args_namespace, "hpml_env", None) or \
        early_config.getini("hpml_env") or "control"
    if mode != "keep":
        enable_triton_interpreter_without_gpu()
        decide_triton_fp_fusion()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU; skipped with a reason when there "
                            "is none")
    config.addinivalue_line("markers", "multi_gpu(n): needs at least n CUDA GPUs visible to "
                            "this process")
    worker = getattr(config, "workerinput", {}).get("workerid")
    if config.option.hpml_require_gpu and worker is None:
        problem = missing_gpu()
        if problem:
            raise pytest.UsageError(f"--hpml-require-gpu: {problem}")
    # Both must happen before CUDA or Triton kernels are touched by test modules, and only in a
    # run that uses the plugin (and Triton's interpreter only where --hpml-env allows changes).
    def set_devices() -> None:
        pin_worker_to_gpu(worker)
        if config.option.hpml_env != "keep":
            enable_triton_interpreter_without_gpu()
            decide_triton_fp_fusion()
    run_of(config).when_used(set_devices)


def pytest_report_header(config: pytest.Config) -> list[str]:
    if run_of(config).used_because is None:
        return []  # a run that does not use the plugin pays for no GPU discovery
    found = gpus.discovery()
    lines = [f"hpml: GPUs: {found.count} found by {found.method}; visible to this run: "
             f"{gpus.visible_gpu_count()}"]
    workers = xdist_workers(config)
    usable = gpus.visible_gpu_count()
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
    have = gpus.visible_gpu_count()
    cuda_ok = have > 0 and gpus.cuda_usable()
    for item in gpu_items:
        need = gpus_needed(item)
        if not cuda_ok:
            reason = NO_CUDA_REASON if have == 0 else (
                f"needs a CUDA GPU: {have} found ({gpus.discovery().method}) but torch cannot use "
                "them (a CPU-only torch build, or a driver too old for it)")
            item.add_marker(pytest.mark.skip(reason=reason))
        elif have < need:
            pinned = " (xdist pins each worker to one GPU: run without -n)" if hasattr(
                config, "workerinput") else ""
            item.add_marker(pytest.mark.skip(reason=f"needs {need} GPUs, {have} visible{pinned}"))
