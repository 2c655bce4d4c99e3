"""What every chart's axes share: a unit that fits the values (GB/s, not 1e+10 B/s), tick labels
as plain numbers, axes that start at zero, and point labels that do not overlap.

matplotlib is imported by the caller (report/plots.py); these helpers take its objects.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any

from pytest_hpml.report.units import scale_for

_PREFIXES = [(1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]


def si_number(value: float) -> str:
    """A tick label: 2, 0.5, 128, 16k, 1M, 1.5G: never 1e+06 (values from a thousand up take a
    prefix; a unit's prefix is chosen by the axis, see axis_scale)."""
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    magnitude = abs(value)
    for factor, prefix in _PREFIXES:
        if magnitude >= factor:
            return f"{value / factor:.4g}{prefix}"
    if magnitude < 1e-3:
        return f"{value:.0e}"
    return f"{value:.4g}"


def axis_scale(unit: str, values: Iterable[float]) -> tuple[float, str]:
    """The factor an axis divides its values by and the unit it then shows: the unit the median
    value reads best in (32.5 GB/s, 7.4 ms), as the report's tables choose it."""
    finite = [abs(v) for v in values if math.isfinite(v) and v != 0]
    if not unit or not finite:
        return 1.0, unit
    return scale_for(unit, statistics.median(finite))


def axis_title(label: str, unit: str) -> str:
    """'busbw [GB/s]'; a label without a unit stays as it is."""
    return f"{label} [{unit}]" if unit else label


def names_its_unit(label: str | None) -> bool:
    """A caller's axis title that already says its unit ('SM clock [Hz]') is used as it is, and
    the values are then drawn unscaled so that the title stays true."""
    return bool(label) and label.rstrip().endswith("]")


def plain_ticks(axis: Any, values: Sequence[float], log: bool, at_values: bool = False) -> None:
    """Tick labels as plain numbers (si_number) on a linear or log axis. On a log axis, data
    within one decade get no decade tick to label, so matplotlib would label minor ticks in
    scientific notation: they are labelled plainly too. A few distinct values (workers 1, 2, 4;
    batch sizes), on either kind of axis, are labelled where they are."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: si_number(v))
    positive = [v for v in values if v > 0]
    if at_values and positive:
        axis.set_major_locator(FixedLocator(sorted(set(positive))))
        axis.set_minor_formatter(NullFormatter())
    elif log and positive and max(positive) / min(positive) < 10:
        axis.set_minor_formatter(plain)
    elif log:
        axis.set_minor_formatter(NullFormatter())
    axis.set_major_formatter(plain)


def from_zero(ax: Any, values: Sequence[float], unit: str) -> None:
    """A linear y axis starts at 0 (a speedup of 0.7 drawn from 0.7 looks like nothing left);
    a percentage of something whole (utilization) runs to 100."""
    finite = [v for v in values if math.isfinite(v)]
    if not finite or min(finite) < 0:
        return
    top = max(finite)
    if unit == "%" and top <= 100:
        ax.set_ylim(0, 100)
    else:
        ax.set_ylim(bottom=0, top=top * 1.05 if top > 0 else 1)


def text_box(note: Any, renderer: Any) -> Any:
    """The window extent of an annotation's text alone (its leader line left out)."""
    from matplotlib.text import Text

    note.update_positions(renderer)  # where the text sits in the window, from its offset
    return Text.get_window_extent(note, renderer)


def _overlaps(box: Any, others: list[Any]) -> bool:
    return any(box.overlaps(other) for other in others)


def _candidates(width_pt: float, height_pt: float, steps: int = 12) -> list[tuple[float, float]]:
    """Offsets (points) to try for a label, nearest first: right of its point, left of it, then
    further below and above, on either side."""
    right, left = 5.0, -5.0 - width_pt
    offsets = [(right, 3.0), (left, 3.0)]
    for step in range(1, steps):
        for dy in (3.0 - step * height_pt, 3.0 + step * height_pt):
            offsets += [(right, dy), (left, dy)]
    return offsets


def place_labels(ax: Any, points: Sequence[tuple[float, float, str, Any]],
                 fontsize: int = 8) -> list:
    """Annotate each (x, y, text, colour) beside its point so that no label overlaps another
    label or another point: each takes the nearest free place (right of its point, left of
    it, then further down or up, with a thin leader line back to the point), in its point's
    colour. Returns the annotations."""
    from matplotlib.transforms import Bbox

    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    marker = 4.0  # pixels around a point that a label keeps clear of
    placed: list[Any] = []
    for x, y, *_ in points:
        px, py = ax.transData.transform((x, y))
        placed.append(Bbox([[px - marker, py - marker], [px + marker, py + marker]]))
    annotations = []
    # Top to bottom, so that a crowded cluster stacks downwards in the order of the points.
    for x, y, text, colour in sorted(points, key=lambda p: -p[1]):
        note = ax.annotate(text, (x, y), textcoords="offset points", xytext=(5, 3),
                           fontsize=fontsize, color=colour, arrowprops=dict(
                               arrowstyle="-", color=colour, lw=0.5, shrinkA=0, shrinkB=3))
        box = text_box(note, renderer)
        points_per_pixel = 72 / fig.dpi
        for offset in _candidates(box.width * points_per_pixel,
                                  box.height * points_per_pixel + 1):
            note.set_position(offset)
            box = text_box(note, renderer)
            if not _overlaps(box, placed):
                break
        placed.append(box)
        annotations.append(note)
    return annotations
