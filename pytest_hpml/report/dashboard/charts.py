"""The dashboard's charts as plotly.js figures (plain dicts: data and layout, drawn in the page
by plotly.js; building them needs no plotly Python object, which keeps a site of thousands of
metrics quick to build).

A history chart puts each save of a metric at its place among the saves of its baseline file
(oldest left): the values of its processes (the spread between them), their median with the
range as error bars, the current level with the band of changes a comparison can detect, the
earlier levels and the moments a save accepted a change. A sweep chart puts the medians of
every row of a test on one chart, one line per row, in log axes where they span decades."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import Any

from pytest_hpml.report.dashboard.judging import Figures
from pytest_hpml.report.dashboard.series import Save, Series, natural
from pytest_hpml.report.units import format_value, scale_for

#: Values spanning this factor or more are drawn on a log axis.
DECADES = 10.0
#: Tick labels kept on an axis of saves (the hover says each save's date).
MOST_TICKS = 10
COLORS = {"process": "rgba(120,120,120,0.55)", "save": "#1f5fa8", "level": "#1f5fa8",
          "band": "rgba(31,95,168,0.13)", "earlier": "#8c8c8c", "accepted": "#c2410c",
          "run": "#6b6b6b", "regressed": "#c81e1e", "improved": "#1f8f4e",
          "ambiguous": "#e0a800"}
#: Where a save's processes are drawn: just right of its median and range.
PROCESS_OFFSET = 0.12


def short_date(on: str | None) -> str:
    return on[:16].replace("T", " ") if on else "date unknown"


def commit_text(commit: str | None) -> str:
    return f"commit {commit[:10]}" if commit else "commit unknown"


def spread_of(values: Iterable[float]) -> float | None:
    """The spread between a save's processes (stdev of their logs, as a relative change)."""
    logs = [math.log(v) for v in values if v > 0]
    return math.expm1(statistics.stdev(logs)) if len(logs) >= 2 else None


def save_positions(s: Series) -> list[float]:
    """Each save's place: its rank among its file's saves; saves of unknown provenance (made
    before saves had ids) come before every known one."""
    known = [s.save_order.get(save.id) if save.id else None for save in s.saves]
    first = min((k for k in known if k is not None), default=0)
    unknown = known.count(None)
    out, seen = [], 0
    for k in known:
        if k is None:
            out.append(float(first - unknown + seen))
            seen += 1
        else:
            out.append(float(k))
    return out


def accepted_positions(s: Series, saves_at: list[float]) -> list[float]:
    """Each accepted change's place: its save's, or (its save unknown) before the history."""
    start = min(saves_at, default=0.0)
    unplaced = [a for a in s.accepted if a.save not in s.save_order]
    out = []
    for a in s.accepted:
        if a.save in s.save_order:
            out.append(float(s.save_order[a.save]))
        else:
            out.append(start - 0.5 * (len(unplaced) - unplaced.index(a)))
    return out


def log_axis(values: Iterable[float]) -> bool:
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) >= DECADES


def _axis_of_saves(positions: list[float], labels: list[str]) -> dict[str, Any]:
    ticks = sorted(dict(zip(positions, labels, strict=True)).items())
    step = max(1, math.ceil(len(ticks) / MOST_TICKS))
    shown = ticks[::-1][::step][::-1]  # the latest save always labelled
    return {"title": {"text": "save (oldest left)"}, "tickvals": [p for p, _ in shown],
            "ticktext": [t for _, t in shown], "tickangle": -30, "zeroline": False}


def _save_hover(s: Series, save: Save, unit: str) -> str:
    median = statistics.median(save.values)
    spread = spread_of(save.values)
    said = (f"between processes ±{spread:.1%}" if spread is not None else "one process")
    sid = f"save {save.id}" if save.id else "save of unknown provenance"
    return (f"<b>{format_value(median, unit)}</b> (median)<br>{sid}: {short_date(save.on)}"
            f"<br>{commit_text(save.commit)}<br>{len(save.values)} process(es), {said}")


def history_figure(s: Series, f: Figures) -> dict[str, Any]:
    """The history chart of one series."""
    saves = [save for save in s.saves if save.values]
    unit = s.metric.unit
    every = [v for save in saves for v in save.values]
    every += [v for a in s.accepted for v in (a.before, a.after)]
    factor, shown = scale_for(unit, statistics.median(every) if every else 1.0)
    at = save_positions(s)
    at = [x for x, save in zip(at, s.saves, strict=True) if save.values]
    medians = [statistics.median(save.values) for save in saves]
    points: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "markers", "name": "processes",
         # beside the save's median and range, so that neither hides the other
         "x": [x + PROCESS_OFFSET for x, save in zip(at, saves, strict=True)
               for _ in save.values],
         "y": [v / factor for save in saves for v in save.values],
         "marker": {"size": 5, "color": COLORS["process"]},
         "hovertemplate": f"%{{y:.4g}} {shown}<extra>process</extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": "save (median)",
         "x": at, "y": [m / factor for m in medians],
         "error_y": {"type": "data", "symmetric": False, "thickness": 1, "width": 3,
                     "array": [(max(sv.values) - m) / factor for sv, m in
                               zip(saves, medians, strict=True)],
                     "arrayminus": [(m - min(sv.values)) / factor for sv, m in
                                    zip(saves, medians, strict=True)]},
         "marker": {"size": 8, "color": COLORS["save"]},
         "line": {"color": COLORS["save"], "width": 1.5},
         "text": [_save_hover(s, save, unit) for save in saves],
         "customdata": [save.commit or "unknown" for save in saves],
         "hovertemplate": "%{text}<extra></extra>"},
    ]
    data: list[dict[str, Any]] = []
    acc_at = accepted_positions(s, at)
    if f.level is not None and at:
        start = max([a for a in acc_at if a <= min(at)] or [min(at)])
        x0, x1 = start, max(at)
        if x0 == x1:
            x0, x1 = x0 - 0.3, x1 + 0.3
        level = f.level / factor
        if f.detectable is not None and math.isfinite(f.detectable):
            lo, hi = level * (1 - min(f.detectable, 0.99)), level * (1 + f.detectable)
            data.append({"type": "scatter", "mode": "lines", "fill": "toself",
                         "name": f"detectable change ±{f.detectable:.1%}",
                         "x": [x0, x1, x1, x0, x0], "y": [lo, lo, hi, hi, lo],
                         "line": {"width": 0}, "fillcolor": COLORS["band"],
                         "hoverinfo": "skip"})
        data.append({"type": "scatter", "mode": "lines", "name": "current level",
                     "x": [x0, x1], "y": [level, level],
                     "line": {"color": COLORS["level"], "dash": "dash", "width": 1.5},
                     "hovertemplate": f"level {format_value(f.level, unit)}<extra></extra>"})
    if s.accepted:
        data += _accepted_traces(s, acc_at, factor, unit)
    data += points  # drawn last: on top, and first to take the hover
    labels = [short_date(save.on) if save.id else "unknown" for save in saves]
    labels += [short_date(a.on) for a in s.accepted]
    ticks = at + acc_at
    run = _run_trace(s, f, max(ticks, default=0.0) + 1, factor)
    if run is not None:
        data.append(run)
        ticks, labels = ticks + run["x"][:1], labels + ["latest run"]
        every += [y * factor for y in run["y"]]
    values = [v / factor for v in every]
    layout = {
        "xaxis": _axis_of_saves(ticks, labels),
        "yaxis": {"title": {"text": f"{s.name} ({shown})" if shown else s.name},
                  "type": "log" if log_axis(values) else "linear", "exponentformat": "SI"},
        "hovermode": "closest", "height": 380, "margin": {"l": 64, "r": 16, "t": 36, "b": 110},
        "legend": {"orientation": "h", "y": -0.42, "font": {"size": 10}},
        "title": {"text": f"{s.machine} · {s.profile}", "font": {"size": 13}, "x": 0.01,
                  "xanchor": "left"},
    }
    return {"data": data, "layout": layout}


def _run_trace(s: Series, f: Figures, x: float, factor: float) -> dict[str, Any] | None:
    """The latest run (its report): its processes' median and range, after the last save."""
    if s.run is None:
        return None
    values = [v for v in s.run.values.values if math.isfinite(v)]
    if not values:
        return None
    median, unit = statistics.median(values), s.metric.unit
    said = f"<b>latest run</b> (its report): {format_value(median, unit)}"
    if f.verdict_from == "run" and f.verdict is not None:
        change = f" {f.verdict.change:+.1%}" if f.verdict.change is not None else ""
        said += f"<br>{f.verdict.outcome}{change} against the level"
    said += f"<br>{len(values)} process(es)"
    return {"type": "scatter", "mode": "markers", "name": "latest run", "x": [x],
            "y": [median / factor], "text": [said], "hovertemplate": "%{text}<extra></extra>",
            "error_y": {"type": "data", "symmetric": False, "thickness": 1, "width": 3,
                        "array": [(max(values) - median) / factor],
                        "arrayminus": [(median - min(values)) / factor]},
            "marker": {"symbol": "star", "size": 13, "color": COLORS.get(
                f.verdict.outcome if f.verdict else "", COLORS["run"]),
                "line": {"width": 1, "color": "#222"}}}


def _accepted_traces(s: Series, acc_at: list[float], factor: float, unit: str
                     ) -> list[dict[str, Any]]:
    """The earlier levels (each from the change that started it to the one that ended it) and
    the accepted changes, each a jump from the level before to the one after."""
    earlier_x: list[float | None] = []
    earlier_y: list[float | None] = []
    jump_x: list[float | None] = []
    jump_y: list[float | None] = []
    texts: list[str] = []
    for i, (a, x) in enumerate(zip(s.accepted, acc_at, strict=True)):
        start = acc_at[i - 1] if i else x - 1
        earlier_x += [start, x, None]
        earlier_y += [a.before / factor, a.before / factor, None]
        said = (f"<b>accepted</b> {short_date(a.on)}<br>{commit_text(a.commit)}"
                f"<br>{format_value(a.before, unit)} → {format_value(a.after, unit)} "
                f"({(a.after - a.before) / abs(a.before):+.1%})" if a.before else "")
        jump_x += [x, x, None]
        jump_y += [a.before / factor, a.after / factor, None]
        texts += [said, said, ""]
    return [
        {"type": "scatter", "mode": "lines", "name": "earlier levels", "x": earlier_x,
         "y": earlier_y, "line": {"color": COLORS["earlier"], "dash": "dot", "width": 2},
         "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines+markers", "name": "accepted changes", "x": jump_x,
         "y": jump_y, "text": texts, "hovertemplate": "%{text}<extra></extra>",
         "line": {"color": COLORS["accepted"], "width": 2},
         "marker": {"symbol": "diamond", "size": 9, "color": COLORS["accepted"]}},
    ]


def sweep_figures(rows: list[Series]) -> list[dict[str, Any]]:
    """One chart per unit of the rows of a test on one machine and profile: each row's save
    medians as a line."""
    by_unit: dict[str, list[Series]] = {}
    for s in sorted(rows, key=lambda s: natural(s.row)):
        by_unit.setdefault(s.metric.unit, []).append(s)
    figures = []
    for unit, group in by_unit.items():
        every = [statistics.median(sv.values) for s in group for sv in s.saves if sv.values]
        factor, shown = scale_for(unit, statistics.median(every) if every else 1.0)
        data, ticks, labels = [], [], []
        for s in group:
            saves = [sv for sv in s.saves if sv.values]
            at = [x for x, sv in zip(save_positions(s), s.saves, strict=True) if sv.values]
            ticks += at
            labels += [short_date(sv.on) if sv.id else "unknown" for sv in saves]
            data.append({"type": "scatter", "mode": "lines+markers", "name": s.row or s.test,
                         "x": at, "y": [statistics.median(sv.values) / factor for sv in saves],
                         "text": [f"<b>{s.row or s.test}</b><br>"
                                  + _save_hover(s, sv, unit) for sv in saves],
                         "customdata": [sv.commit or "unknown" for sv in saves],
                         "hovertemplate": "%{text}<extra></extra>"})
        name = group[0].name
        figures.append({"data": data, "layout": {
            "xaxis": _axis_of_saves(ticks, labels),
            "yaxis": {"title": {"text": f"{name} ({shown})" if shown else name},
                      "type": "log" if log_axis([v / factor for v in every]) else "linear",
                      "exponentformat": "SI"},
            "hovermode": "closest", "height": 380,
            "margin": {"l": 64, "r": 16, "t": 36, "b": 72},
            "title": {"text": f"{group[0].machine} · {group[0].profile}: every row",
                      "font": {"size": 13}, "x": 0.01, "xanchor": "left"}}})
    return figures
