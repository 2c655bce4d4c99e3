"""SI base units inside, readable units when printing."""

from __future__ import annotations

import math

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, "")]
_SUB_SECOND = [(1.0, "s"), (1e-3, "ms"), (1e-6, "us"), (1e-9, "ns")]
_SCALED_UNITS = {"B/s", "FLOP/s", "FLOP", "B", "OP/s", "OP", "Hz", "1/s"}


def scale_for(unit: str, value: float) -> tuple[float, str]:
    """The factor to divide by and the printed unit for `value` given in `unit`."""
    magnitude = abs(value)
    if unit == "s":
        if magnitude == 0 or not math.isfinite(magnitude):
            return 1.0, "s"
        for factor, name in _SUB_SECOND:
            if magnitude >= factor:
                return factor, name
        return 1e-9, "ns"
    if unit in _SCALED_UNITS:
        base, rest = (unit.split("/", 1) + [""])[:2]
        for factor, prefix in _PREFIXES:
            if magnitude >= factor:
                if base == "1":  # a rate of things (images, steps) per second: 5.927 M/s
                    return factor, f"{prefix}/{rest}" if prefix else unit
                return factor, f"{prefix}{base}" + (f"/{rest}" if rest else "")
        return 1.0, unit
    return 1.0, unit


def format_value(value: float, unit: str, spread: float | None = None) -> str:
    """'1.23 ms', or '1.23 ± 0.04 ms' with a spread (an IQR) in the same unit."""
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} {unit}".strip()
    factor, shown = scale_for(unit, value)
    return f"{format_scaled(value, unit, factor, spread)} {shown}".strip()


def format_change(before: float | None, after: float | None, unit: str) -> str:
    """'20.16 -> 30.12 ms': two values of one unit, scaled alike (by the first)."""
    if before is None or after is None:
        return f"{format_value(before, unit)} -> {format_value(after, unit)}".strip()
    at = before if math.isfinite(before) and before != 0 else after
    factor, shown = scale_for(unit, at if math.isfinite(at) else 0.0)
    return (f"{format_scaled(before, unit, factor)} -> {format_scaled(after, unit, factor)} "
            f"{shown}").strip()


def format_scaled(value: float, unit: str, factor: float, spread: float | None = None) -> str:
    """The number of a cell whose unit (value's unit scaled by `factor`) is printed elsewhere,
    a column header: '1.23', or '1.23 ± 0.04' with a spread (an IQR)."""
    if not math.isfinite(value):
        return str(value)
    text = format_number(value / factor, unit)
    if spread is not None and math.isfinite(spread):
        text += f" ± {_spread_digits(spread / factor, text)}"
    return text


def _spread_digits(spread: float, value_text: str) -> str:
    """A spread in four digits; one too small for them (below 0.001) takes the decimals of the
    value beside it instead of scientific notation: '0.005553 ± 0.000891'."""
    if spread == 0 or abs(spread) >= 1e-3 or "e" in value_text or "." not in value_text:
        return four_digits(spread)
    decimals = len(value_text.split(".")[1])
    shown = f"{spread:.{decimals}f}"
    return shown if float(shown) != 0 else four_digits(spread)


def format_number(x: float, unit: str = "") -> str:
    """A table cell's number: whole numbers (counts of parameters, images, bytes) print exactly;
    everything else with four significant digits. Times never do, so a column of milliseconds
    keeps one format."""
    if unit != "s" and math.isfinite(x) and float(x).is_integer() and abs(x) < 1e15:
        return f"{int(x):,}"
    return four_digits(x)


def four_digits(x: float) -> str:
    """Four significant digits, fixed-point in the readable range, scientific outside it."""
    if x == 0:
        return "0"
    if not math.isfinite(x):
        return str(x)
    magnitude = abs(x)
    if magnitude >= 1e5 or magnitude < 1e-3:
        return f"{x:.3e}"
    decimals = max(0, 3 - math.floor(math.log10(magnitude)))
    return f"{x:.{decimals}f}"


# -- converting between units of the same quantity ----------------------------------------------

_TIME = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}
_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
       "m": 1e-3, "u": 1e-6, "µ": 1e-6, "n": 1e-9}
_BINARY = {"Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40}
#: Quantities whose unit takes a prefix (the rest are compared by name only: "tokens/s").
_PREFIXED = ("FLOP", "OP", "bit", "B", "Hz")


def _quantity(text: str) -> tuple[float, str]:
    """(factor to the base unit, base unit) of one side of a unit: 'GB' -> (1e9, 'B')."""
    text = text.strip()
    if text in _TIME:
        return _TIME[text], "s"
    for base in _PREFIXED:
        if text.endswith(base):
            prefix = text[:-len(base)]
            if prefix in _BINARY:
                return _BINARY[prefix], base
            if prefix in _SI and not (base == "B" and prefix in ("m", "u", "µ", "n")):
                return _SI[prefix], base
    return 1.0, text


def conversion(source: str, target: str) -> float | None:
    """The factor that turns a value in `source` into `target` (5 ms -> s: 1e-3; GB/s -> B/s:
    1e9), 1 for the same unit, None where they measure different things (s and B/s)."""
    if source == target:
        return 1.0
    sides = []
    for unit in (source, target):
        top, _, bottom = unit.partition("/")
        factor, base = _quantity(top)
        if bottom:
            per, per_base = _quantity(bottom)
            factor, base = (factor / per, f"{base}/s") if per_base == "s" else (1.0, unit)
        elif base == "Hz":
            base = "1/s"
        sides.append((factor, base))
    (f_source, b_source), (f_target, b_target) = sides
    if b_source != b_target:
        return None
    return f_source / f_target


#: A detectable change beyond this many times the value is said as "over" it: the exact
#: figure of a spread of 40 % between 3 processes (a t quantile of 1 degree of freedom,
#: exponentiated) reads as millions of percent and means only "blind".
DETECTABLE_SHOWN_UP_TO = 10.0


def format_detectable(mdc: float) -> str:
    """A minimum detectable change as a table and a message show it: `±60.3%`, or
    `over ±1000%` where it is larger."""
    if mdc > DETECTABLE_SHOWN_UP_TO:
        return f"over ±{DETECTABLE_SHOWN_UP_TO:.0%}"
    return f"±{mdc:.1%}"
