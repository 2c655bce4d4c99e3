"""A metric's value as a plain float: what results.Metric accepts (python numbers, numpy
scalars, one-element tensors and arrays) and what it refuses, naming the metric; and a document
as standard JSON holds it (json_safe)."""

from __future__ import annotations

import math
import numbers
from typing import Any


def plain_number(value: Any, name: str = "") -> float:
    """Accept python numbers, numpy scalars and 0-d tensors; keep the record JSON-safe."""
    if type(value) is float:  # the common case, ahead of the checks (70 000 per 10k-row save)
        return value
    what = f"metric {name!r}: " if name else ""
    if hasattr(value, "item"):
        size = value.numel() if hasattr(value, "numel") else getattr(value, "size", 1)
        if size != 1:
            raise TypeError(f"{what}a metric value is one number, got a "
                            f"{type(value).__name__} of {size} elements; record each as its "
                            "own metric, or one figure of them (.mean().item(), .max().item())")
        value = value.item()
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, numbers.Real) and not isinstance(value, (int, float)):
        value = float(value)  # numpy's longdouble: .item() keeps it a longdouble
    if not isinstance(value, (int, float)):
        raise TypeError(f"{what}a metric value must be a number, got {type(value).__name__}")
    try:
        return float(value)
    except OverflowError:
        raise ValueError(f"metric {name!r}: {value} does not fit a float64") from None


def json_safe(obj: Any) -> Any:
    """`obj` with every non-finite float as None: standard JSON (JSON.parse, which dashboard
    actions use, rejects the NaN and Infinity that Python's json writes by default)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        try:  # numbers alone, all finite (a history, samples): as they are, summed in C
            if math.isfinite(math.fsum(obj)):
                return list(obj)
        except (TypeError, OverflowError, ValueError):
            pass
        return [json_safe(v) for v in obj]
    return obj
