"""pytest-hpml: high-performance ML experiments as parametrized pytest tests."""

from pytest_hpml.results import Metric, Record
from pytest_hpml.selection import precisions
from pytest_hpml.timing import Timing

__all__ = ["Metric", "Record", "Timing", "precisions"]
__version__ = "0.1.0"
