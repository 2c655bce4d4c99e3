"""Charts from records, drawn by the controller at the end of the session (matplotlib extra)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_hpml.report.axes import (
    axis_scale,
    axis_title,
    from_zero,
    names_its_unit,
    place_labels,
    plain_ticks,
)
from pytest_hpml.report.files import write_atomic
from pytest_hpml.report.tables import _unique, group_by_experiment
from pytest_hpml.report.units import format_value
from pytest_hpml.results import Record

#: Said once in a run that asks for charts without matplotlib.
NO_MATPLOTLIB = ("--hpml-plots: matplotlib is not installed, so no charts are drawn "
                 "(pip install 'pytest-hpml[plots]').")


def matplotlib_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def plot_path(directory: str | Path | None, filename: str,
              say: Callable[[str], None] | None = None) -> Path | None:
    """Where a test writes a chart of its own in the --hpml-plots folder; None without the
    folder, or without matplotlib (said through `say`)."""
    if not directory:
        return None
    if not matplotlib_available():
        if say:
            say(NO_MATPLOTLIB)
        return None
    Path(directory).mkdir(parents=True, exist_ok=True)
    return Path(directory) / filename


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on CI runners or GPU boxes
    import matplotlib.pyplot as plt

    return plt


def _value(record: Record, key: str) -> float | None:
    """A parameter or a metric of the row, whichever the chart names."""
    if key in record.params:
        try:
            return float(record.params[key])
        except (TypeError, ValueError):
            return None
    m = record.metric(key)
    return m.value if m is not None and math.isfinite(m.value) else None


class NothingToDraw(Exception):
    """A chart whose rows ran but give no point to draw; the message says why."""


def _why_nothing(rows: list[Record], spec: dict[str, Any], keys: tuple[str, ...]) -> str:
    """Why no row of a chart gives a point: the first of `keys` (x, y, peak ...) that no row
    has as a number, with what the rows do have."""
    for key in keys:
        name = spec.get(key)
        if name is None:
            return f"it needs {key}= (a parameter or a metric of its rows)"
        names = name if isinstance(name, (list, tuple)) else [name]
        if any(_value(r, n) is not None for r in rows for n in names):
            continue
        found = [r.params[n] for r in rows for n in names if n in r.params]
        found += [m.value for r in rows for n in names if (m := r.metric(n))]
        if found:
            return f"{key}={name!r} is not a finite number in any row (e.g. {found[0]!r})"
        known = sorted({*(k for r in rows for k in r.params),
                        *(m.name for r in rows for m in r.metrics)})
        return f"no row has {key}={name!r}; its rows have {', '.join(known)}"
    return "no row has all of " + ", ".join(f"{k}={spec.get(k)!r}" for k in keys)


def _save(fig: Any, path: Path) -> Path:
    """A chart written atomically, as every output is (a full disk keeps the previous one)."""
    return write_atomic(path, lambda f: fig.savefig(f, dpi=120,
                                                    format=path.suffix[1:] or "png"),
                        binary=True)


def _selected(records: list[Record], spec: dict[str, Any]) -> list[Record]:
    """The rows a chart's `where` admits; a list admits several values (e.g. the CPU rows
    beside one memory mode)."""
    where = spec.get("where") or {}
    return [r for r in records if all(
        r.params.get(k) in v if isinstance(v, (list, tuple)) else r.params.get(k) == v
        for k, v in where.items())]


def _unit(rows: list[Record], key: str) -> str:
    """The unit of the metric `key` in the rows ("" for a parameter or a unitless figure)."""
    for r in rows:
        m = r.metric(key)
        if m is not None:
            return m.unit
    return ""


def _scaled_axis(label: str | None, name: str, unit: str,
                 values: list[float]) -> tuple[float, str]:
    """The factor the axis's values are divided by, and its title with the unit that fits them
    (axes.axis_scale); a caller's title that names its unit is kept, with values unscaled."""
    if names_its_unit(label):
        return 1.0, str(label)
    factor, shown = axis_scale(unit, values)
    return factor, axis_title(label or name, shown)


def _series_label(key: str, value: Any) -> str:
    """A legend entry that says what it is: 'explicit', and for a number 'workers=2'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        text = str(value)
        try:
            float(text)
        except ValueError:
            return text
    return f"{key}={value}"


def line_figure(records: list[Record], spec: dict[str, Any]) -> Any | None:
    """The figure of a line chart (y against x, one line per `series`), or None when none of
    its rows ran. logx / logy are opt-in, as the marker's documentation shows them."""
    rows = _selected(records, spec)
    if not rows:
        return None  # its rows did not run (another device, deselected)
    series_key = spec.get("series")
    if "x" not in spec or "y" not in spec:
        raise NothingToDraw(_why_nothing(rows, spec, ("x", "y")))
    lines: list[tuple[str | None, list[tuple[float, float]]]] = []
    for name in _unique(r.params.get(series_key) for r in rows) if series_key else [None]:
        points = sorted(
            (x, y) for r in rows if series_key is None or r.params.get(series_key) == name
            for x, y in [(_value(r, spec["x"]), _value(r, spec["y"]))]
            if x is not None and y is not None
        )
        if points:
            lines.append((None if name is None else _series_label(series_key, name), points))
    if not lines:
        raise NothingToDraw(_why_nothing(rows, spec, ("x", "y")))
    xs = [x for _, pts in lines for x, _ in pts]
    ys = [y for _, pts in lines for _, y in pts]
    xfactor, xtitle = _scaled_axis(spec.get("xlabel"), spec["x"], _unit(rows, spec["x"]), xs)
    yunit = _unit(rows, spec["y"])
    yfactor, ytitle = _scaled_axis(spec.get("ylabel"), spec["y"], yunit, ys)
    logx, logy = bool(spec.get("logx", False)), bool(spec.get("logy", False))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for label, points in lines:
        ax.plot([x / xfactor for x, _ in points], [y / yfactor for _, y in points], marker="o",
                label=label)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    distinct_x = sorted({x / xfactor for x in xs})
    plain_ticks(ax.xaxis, distinct_x, logx, at_values=len(distinct_x) <= 8)
    plain_ticks(ax.yaxis, [y / yfactor for y in ys], logy)
    if not logy:
        from_zero(ax, [y / yfactor for y in ys], "%" if yfactor == 1 and yunit == "%" else "")
    ax.set_xlabel(xtitle)
    ax.set_ylabel(ytitle)
    ax.set_title(spec.get("title", ""))
    ax.grid(True, which="both", alpha=0.3)
    if series_key:
        lines = len(ax.get_legend_handles_labels()[0])
        if lines > 4:
            # Many series: inside, the legend hid lines wherever it went (the vector add's
            # eight on unified memory); under the axes it hides none.
            ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.14),
                      ncols=min(lines, 3), frameon=False)
        else:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def roofline_figure(records: list[Record], spec: dict[str, Any]) -> Any | None:
    """Points (arithmetic intensity, achieved FLOP/s) under min(peak, intensity x bandwidth),
    in the FLOP/s unit that fits the peak, each point labelled where no other label is."""
    rows = _selected(records, spec)
    if not rows:
        return None  # its rows did not run (another device, deselected)
    keys = ("x", "y", "peak", "bandwidth")
    if any(k not in spec for k in keys):
        raise NothingToDraw(_why_nothing(rows, spec, keys))
    points = []
    peak = bandwidth = None
    for r in rows:
        x, y = _value(r, spec["x"]), _value(r, spec["y"])
        peak = _value(r, spec["peak"]) or peak
        bandwidth = _value(r, spec["bandwidth"]) or bandwidth
        if x and y:
            points.append((x, y, str(r.params.get(spec.get("label", ""), r.id))))
    if not points or not peak or not bandwidth:
        raise NothingToDraw(_why_nothing(rows, spec, keys))
    # The unit that fits the points and the roof together (GFLOP/s on a CPU, TFLOP/s on a GPU).
    factor, unit = axis_scale("FLOP/s", [y for _, y, _ in points] + [peak])
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ridge = peak / bandwidth
    intensities = [p[0] for p in points] + [ridge]
    xs = [min(intensities) / 4, ridge, max(intensities) * 4]
    ax.plot(xs, [min(peak, x * bandwidth) / factor for x in xs], color="black",
            label=f"roof (measured): {format_value(peak, 'FLOP/s')} compute, "
                  f"{format_value(bandwidth, 'B/s')} memory")
    colours = [ax.scatter([x], [y / factor], zorder=3).get_facecolor()[0]
               for x, y, _ in points]
    ax.set_xscale("log")
    ax.set_yscale("log")
    plain_ticks(ax.xaxis, xs, log=True)
    plain_ticks(ax.yaxis, [y / factor for _, y, _ in points] + [peak / factor], log=True)
    ax.set_xlabel(spec.get("xlabel", "arithmetic intensity [FLOP/B]"))
    ax.set_ylabel(spec.get("ylabel", f"achieved [{unit}]"))
    ax.set_title(spec.get("title", "Roofline"))
    ax.grid(True, which="both", alpha=0.3)
    # Under the axes: inside, wherever it went, it could hide a point (an H200's resnet18 sat
    # behind it at the lower right).
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.16), frameon=False)
    fig.tight_layout()
    place_labels(ax, [(x, y / factor, label, colour)
                      for (x, y, label), colour in zip(points, colours, strict=True)])
    return fig


def timeseries_figure(records: list[Record], spec: dict[str, Any]) -> Any | None:
    """Each row's series (a metric's samples, one per sample_interval) against time, its y axis
    from 0 (to 100 for a percentage)."""
    rows = _selected(records, spec)
    if not rows:
        return None  # its rows did not run (another device, deselected)
    if "y" not in spec:
        raise NothingToDraw(_why_nothing(rows, spec, ("y",)))
    names = spec["y"] if isinstance(spec["y"], (list, tuple)) else [spec["y"]]
    series_key = spec.get("series")
    lines = []
    for r in rows:
        interval = _value(r, spec.get("interval", "sample_interval")) or 1.0
        for name in names:
            m = r.metric(name)
            if m is None or not m.samples:
                continue
            if series_key is None:
                label = name
            else:
                label = _series_label(series_key, r.params.get(series_key))
                label += f" {name}" if len(names) > 1 else ""
            lines.append((label, m.unit, interval, m.samples))
    if not lines:
        with_series = [n for n in names for r in rows if (m := r.metric(n)) and m.samples]
        raise NothingToDraw(_why_nothing(rows, spec, ("y",)) if not with_series else
                            "no row has samples of " + ", ".join(map(repr, names)))
    unit = lines[0][1] if len({u for _, u, _, _ in lines}) == 1 else ""
    values = [v for *_, samples in lines for v in samples]
    factor, title = _scaled_axis(spec.get("ylabel"), ", ".join(names), unit, values)
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    for label, _, interval, samples in lines:
        ax.plot([interval * (i + 1) for i in range(len(samples))],
                [v / factor for v in samples], label=label)
    ax.set_xlabel(spec.get("xlabel", "time [s]"))
    ax.set_ylabel(title)
    ax.set_title(spec.get("title", ""))
    plain_ticks(ax.yaxis, [v / factor for v in values], log=False)
    from_zero(ax, [v / factor for v in values], unit if factor == 1 else "")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def _drawn(figure: Callable[[list[Record], dict[str, Any]], Any | None]
           ) -> Callable[[Path, list[Record], dict[str, Any]], Path | None]:
    """A chart kind as draw_all calls it: its figure, written to `path` and closed."""

    def chart(path: Path, records: list[Record], spec: dict[str, Any]) -> Path | None:
        fig = figure(records, spec)
        if fig is None:
            return None
        try:
            _save(fig, path)
        finally:
            _pyplot().close(fig)
        return path

    chart.__doc__ = figure.__doc__
    return chart


line_chart = _drawn(line_figure)
roofline_chart = _drawn(roofline_figure)
timeseries_chart = _drawn(timeseries_figure)


CHARTS = {"line": line_chart, "roofline": roofline_chart, "timeseries": timeseries_chart}
CHART_KINDS = tuple(CHARTS)


def draw_all(directory: Path, records: list[Record],
             say: Callable[[str], None] | None = None) -> list[Path]:
    """Every chart the records' markers ask for; a chart whose rows ran but give no point is
    one line through `say` (a misspelt y=, a string x), a chart whose rows did not run none."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for experiment, group in group_by_experiment(records).items():
        specs = _unique_specs(r.views.get("plots", []) for r in group)
        for spec in specs:
            kind = spec.get("kind", "line")
            try:
                out = CHARTS[kind](directory / spec["filename"], group, spec)
            except NothingToDraw as why:
                if say:
                    say(f"--hpml-plots: chart {spec['filename']} ({kind}, {experiment}) not "
                        f"drawn: {why}")
                continue
            if out:
                written.append(out)
    return written


def _unique_specs(lists) -> list[dict[str, Any]]:
    seen, out = set(), []
    for specs in lists:
        for spec in specs:
            key = repr(sorted(spec.items()))
            if key not in seen:
                seen.add(key)
                out.append(spec)
    return out
