"""Charts from records, drawn by the controller at the end of the session (matplotlib extra)."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_hpml.report.files import write_atomic
from pytest_hpml.report.tables import _unique, group_by_experiment
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


def _plain_log_ticks(axis: Any, values: list[float], at_values: bool = False) -> None:
    """Log-axis ticks as plain numbers (2, not 2 x 10^0). Data within one decade get no
    decade tick to label, so matplotlib labels minor ticks in scientific notation; a few
    distinct values (workers 1, 2, 4; batch sizes) are labelled where they are."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    positive = [v for v in values if v > 0]
    if at_values and positive:
        axis.set_major_locator(FixedLocator(positive))
        axis.set_minor_formatter(NullFormatter())
    elif positive and max(positive) / min(positive) < 10:
        axis.set_minor_formatter(plain)
    axis.set_major_formatter(plain)


def line_chart(path: Path, records: list[Record], spec: dict[str, Any]) -> Path | None:
    rows = _selected(records, spec)
    if not rows:
        return None  # its rows did not run (another device, deselected)
    series_key = spec.get("series")
    if "x" not in spec or "y" not in spec:
        raise NothingToDraw(_why_nothing(rows, spec, ("x", "y")))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    drawn: list[tuple[float, float]] = []
    for name in _unique(r.params.get(series_key) for r in rows) if series_key else [None]:
        points = sorted(
            (x, y) for r in rows if series_key is None or r.params.get(series_key) == name
            for x, y in [(_value(r, spec["x"]), _value(r, spec["y"]))]
            if x is not None and y is not None
        )
        if points:
            label = str(name) if name is not None else None
            ax.plot(*zip(*points, strict=True), marker="o", label=label)
            drawn += points
    if not drawn:
        plt.close(fig)
        raise NothingToDraw(_why_nothing(rows, spec, ("x", "y")))
    xs = sorted({x for x, _ in drawn})
    if spec.get("logx", True):
        ax.set_xscale("log")
        _plain_log_ticks(ax.xaxis, xs, at_values=len(xs) <= 8)
    if spec.get("logy", True):
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis, [y for _, y in drawn])
    ax.set_xlabel(spec.get("xlabel", spec["x"]))
    ax.set_ylabel(spec.get("ylabel", spec["y"]))
    ax.set_title(spec.get("title", ""))
    ax.grid(True, which="both", alpha=0.3)
    if series_key:
        ax.legend()
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def roofline_chart(path: Path, records: list[Record], spec: dict[str, Any]) -> Path | None:
    """Points (arithmetic intensity, achieved FLOP/s) under min(peak, intensity x bandwidth)."""
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
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    ridge = peak / bandwidth
    xs = [min(p[0] for p in points + [(ridge, 0, "")]) / 4, ridge,
          max(p[0] for p in points + [(ridge, 0, "")]) * 4]
    ax.plot(xs, [min(peak, x * bandwidth) for x in xs], color="black",
            label=f"roof: {peak / 1e12:.3g} TFLOP/s, {bandwidth / 1e9:.3g} GB/s (measured)")
    for x, y, label in points:
        ax.scatter([x], [y])
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=8)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity [FLOP/B]")
    ax.set_ylabel("FLOP/s")
    ax.set_title(spec.get("title", "Roofline"))
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


def timeseries_chart(path: Path, records: list[Record], spec: dict[str, Any]) -> Path | None:
    """Each row's series (a metric's samples, one per sample_interval) against time."""
    rows = _selected(records, spec)
    if not rows:
        return None  # its rows did not run (another device, deselected)
    if "y" not in spec:
        raise NothingToDraw(_why_nothing(rows, spec, ("y",)))
    names = spec["y"] if isinstance(spec["y"], (list, tuple)) else [spec["y"]]
    series_key = spec.get("series")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.2, 4.0))
    drawn = False
    for r in rows:
        interval = _value(r, spec.get("interval", "sample_interval")) or 1.0
        for name in names:
            m = r.metric(name)
            if m is None or not m.samples:
                continue
            label = name if series_key is None else f"{r.params.get(series_key)} {name}"
            ax.plot([interval * (i + 1) for i in range(len(m.samples))], m.samples, label=label)
            drawn = True
    if not drawn:
        plt.close(fig)
        with_series = [n for n in names for r in rows if (m := r.metric(n)) and m.samples]
        raise NothingToDraw(_why_nothing(rows, spec, ("y",)) if not with_series else
                            "no row has samples of " + ", ".join(map(repr, names)))
    ax.set_xlabel(spec.get("xlabel", "time [s]"))
    ax.set_ylabel(spec.get("ylabel", ", ".join(names)))
    ax.set_title(spec.get("title", ""))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    _save(fig, path)
    plt.close(fig)
    return path


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
