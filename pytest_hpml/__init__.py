"""pytest-hpml: high-performance ML experiments as parametrized pytest tests.

What a lab or a tool may use is exported here (and the launcher, pytest_hpml.distributed);
everything else in the package is the plugin's own and may change.
"""

from pytest_hpml.fixture import Hpml, OutOfMemory, Recorder
from pytest_hpml.results import Metric, Record
from pytest_hpml.selection import precisions
from pytest_hpml.timing import Timing, TimingConfig
from pytest_hpml.verdicts import compare_results, read_results

__all__ = [
    "Hpml",
    "Metric",
    "OutOfMemory",
    "Record",
    "Recorder",
    "Timing",
    "TimingConfig",
    "compare_results",
    "precisions",
    "read_results",
]
__version__ = "0.2.0"
