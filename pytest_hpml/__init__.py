"""pytest-hpml: high-performance ML experiments as parametrized pytest tests.

What a lab or a tool may use is exported here (and the launcher, pytest_hpml.distributed);
everything else in the package is the plugin's own and may change. The names load on first
use: importing the package (as pytest does before it registers the plugin's modules) imports
none of them, so pytest can still rewrite the plugin modules' assertions.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_hpml.compare.results_files import compare_results, read_results
    from pytest_hpml.fixture import Hpml
    from pytest_hpml.machine.kernels import KernelResources
    from pytest_hpml.measure.busy_wait import gpu_busy_wait
    from pytest_hpml.measure.memory import is_out_of_memory
    from pytest_hpml.measure.timing import Timing, TimingConfig
    from pytest_hpml.recorder import OutOfMemory, Recorder
    from pytest_hpml.results import Metric, Record
    from pytest_hpml.selection import precisions
    from pytest_hpml.verdict import Verdict

_EXPORTS = {
    "Hpml": "pytest_hpml.fixture",
    "KernelResources": "pytest_hpml.machine.kernels",
    "Metric": "pytest_hpml.results",
    "OutOfMemory": "pytest_hpml.recorder",
    "Record": "pytest_hpml.results",
    "Recorder": "pytest_hpml.recorder",
    "Timing": "pytest_hpml.measure.timing",
    "TimingConfig": "pytest_hpml.measure.timing",
    "compare_results": "pytest_hpml.compare.results_files",
    "gpu_busy_wait": "pytest_hpml.measure.busy_wait",
    "precisions": "pytest_hpml.selection",
    "read_results": "pytest_hpml.compare.results_files",
    "Verdict": "pytest_hpml.verdict",
    "is_out_of_memory": "pytest_hpml.measure.memory",
}
__all__ = [
    "Hpml",
    "KernelResources",
    "Metric",
    "OutOfMemory",
    "Record",
    "Recorder",
    "Timing",
    "TimingConfig",
    "Verdict",
    "compare_results",
    "gpu_busy_wait",
    "is_out_of_memory",
    "precisions",
    "read_results",
]
__version__ = "0.2.0"


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'pytest_hpml' has no attribute {name!r}")
    return getattr(import_module(_EXPORTS[name]), name)


def __dir__() -> list[str]:
    return [*globals(), *__all__]
