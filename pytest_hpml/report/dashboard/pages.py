"""The dashboard's HTML: the index (every metric in one sortable, filterable table, with a
sparkline of its history drawn as inline SVG, so the index opens without loading any charting
code) and one page per metric of a test (its rows and machines), whose charts plotly.js draws
from figures embedded in the page. Every text from a file is escaped for HTML."""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from html import escape
from typing import Any

from pytest_hpml.report.dashboard.charts import commit_text, short_date
from pytest_hpml.report.dashboard.judging import Figures
from pytest_hpml.report.dashboard.series import Series
from pytest_hpml.report.units import format_value

#: The index's columns: (heading, how it sorts).
COLUMNS = [("test", "text"), ("row", "text"), ("metric", "text"), ("lab", "text"),
           ("machine", "text"), ("profile", "text"), ("verdict", "text"),
           ("latest", "number"), ("change", "number"), ("detectable", "number"),
           ("history", "none"), ("flags", "text")]
FILTERS = ("lab", "machine", "profile", "verdict")


@dataclass
class Entry:
    """One series as the site shows it."""

    series: Series
    figures: Figures
    page: str  # the metric page, relative to the site's root
    anchor: str  # the series' panel on that page


def _shell(title: str, body: str, root: str, scripts: tuple[str, ...] = ()) -> str:
    tags = "".join(f'<script src="{root}{name}"></script>' for name in scripts)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<meta name="generator" content="pytest-hpml dashboard">'
            f"<title>{escape(title)}</title>"
            f'<link rel="stylesheet" href="{root}dashboard.css"></head>\n<body>\n{body}\n'
            f'{tags}<script src="{root}dashboard.js"></script>\n</body></html>\n')


def sparkline(values: list[float], width: int = 110, height: int = 26) -> str:
    """The medians of a metric's saves as a small SVG line (the latest as a dot)."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or abs(hi) or 1.0
    step = (width - 6) / max(len(values) - 1, 1)
    points = [(3 + i * step, height - 3 - (v - lo) / span * (height - 6))
              for i, v in enumerate(values)]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y in points)
    x, y = points[-1]
    return (f'<svg class="spark" width="{width}" height="{height}" role="img" '
            f'aria-label="{len(values)} saves"><polyline points="{path}"/>'
            f'<circle cx="{x:.1f}" cy="{y:.1f}" r="2.5"/></svg>')


def _number(value: float | None) -> str:
    return "" if value is None or not math.isfinite(value) else repr(value)


def _pct(value: float | None, signed: bool = False) -> str:
    if value is None or not math.isfinite(value):
        return ""
    return f"{value:+.1%}" if signed else f"±{value:.1%}"


def verdict_class(outcome: str) -> str:
    return outcome.split(" ")[0].strip("(") if outcome else "none"


def flags(e: Entry) -> list[tuple[str, str]]:
    """(flag, what it means) of a series: blind spots, accepted levels, unknown provenance."""
    s, found = e.series, []
    if e.figures.blind:
        found.append(("blind spot", e.figures.blind))
    if s.accepted:
        last = s.accepted[-1]
        found.append((f"accepted ×{len(s.accepted)}", f"last accepted {short_date(last.on)}, "
                      f"{commit_text(last.commit)}: {format_value(last.before, s.metric.unit)}"
                      f" -> {format_value(last.after, s.metric.unit)}"))
    if any(save.id is None for save in s.saves):
        found.append(("provenance unknown", "saved before baselines recorded each save's date "
                      "and commit"))
    if s.metric.seeded_from:
        found.append(("seeded", f"the baseline is {s.metric.seeded_from}"))
    return found


def _index_row(e: Entry) -> str:
    s, f = e.series, e.figures
    medians = [statistics.median(save.values) for save in s.saves if save.values]
    text = " ".join((s.test, s.row, s.name, s.experiment)).lower()
    attrs = {"lab": s.lab, "machine": s.machine, "profile": s.profile,
             "verdict": f.outcome, "text": text}
    data = " ".join(f'data-{k}="{escape(v)}"' for k, v in attrs.items())
    flag_html = " ".join(f'<span class="flag" title="{escape(why)}">{escape(name)}</span>'
                         for name, why in flags(e))
    href = f"{e.page}#panel-{e.anchor}"
    cells = [
        f'<td><a href="{escape(href)}">{escape(s.test)}</a></td>',
        f"<td>{escape(s.row)}</td>", f"<td>{escape(s.name)}</td>", f"<td>{escape(s.lab)}</td>",
        f'<td title="{escape(s.hardware)}">{escape(s.machine)}</td>',
        f"<td>{escape(s.profile)}</td>",
        f'<td><span class="verdict {verdict_class(f.outcome)}" '
        f'title="{escape(f.verdict.basis or "") if f.verdict else ""}">'
        f"{escape(f.outcome)}</span></td>",
        f'<td class="num" data-sort="{_number(f.latest)}">'
        f"{escape(format_value(f.latest, s.metric.unit)) if f.latest is not None else ''}</td>",
        f'<td class="num" data-sort="{_number(f.change)}">{_pct(f.change, True)}</td>',
        f'<td class="num" data-sort="{_number(f.detectable)}">{_pct(f.detectable)}</td>',
        f"<td>{sparkline(medians)}</td>", f"<td>{flag_html}</td>"]
    return f"<tr {data}>{''.join(cells)}</tr>"


def index_page(entries: list[Entry], problems: list[str], about: str) -> str:
    options = {k: sorted({getattr(e.series, k) if k != "verdict" else e.figures.outcome
                          for e in entries}) for k in FILTERS}
    selects = "".join(
        f'<label>{name} <select data-filter="{name}"><option value="">all</option>'
        + "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        + "</select></label>" for name, values in options.items())
    heads = "".join(f'<th data-sort-type="{kind}" scope="col">{name}</th>'
                    for name, kind in COLUMNS)
    warn = ""
    if problems:
        warn = ('<div class="problems"><b>Left out:</b><ul>'
                + "".join(f"<li>{escape(p)}</li>" for p in problems) + "</ul></div>")
    body = (f"<header><h1>pytest-hpml history</h1><p>{about}</p></header>{warn}"
            f'<div class="controls"><label>search <input id="q" type="search" '
            f'placeholder="test, row or metric"></label>{selects}'
            f'<span id="count">{len(entries)} of {len(entries)} metrics</span></div>'
            f'<table id="metrics"><thead><tr>{heads}</tr></thead><tbody>'
            + "".join(_index_row(e) for e in entries) + "</tbody></table>")
    return _shell("pytest-hpml history", body, "")


def _panel_text(e: Entry) -> str:
    s, f = e.series, e.figures
    unit = s.metric.unit
    lines = []
    if f.verdict is not None:
        what = {"run": "the latest run's verdict (its report)",
                "save": "the latest save against the level before it",
                "accepted": "the latest save accepted a change"}[f.verdict_from]
        lines.append(f'<p><span class="verdict {verdict_class(f.outcome)}">'
                     f"{escape(f.outcome)}</span> {_pct(f.change, True)} "
                     f"<small>({escape(what)})</small></p>")
        if f.verdict.basis:
            lines.append(f'<p class="basis">{escape(f.verdict.basis)}</p>')
    else:
        lines.append("<p>One save so far: no verdict until the next one.</p>")
    level = format_value(f.level, unit) if f.level is not None else "none"
    runs = "the latest run's" if f.verdict_from == "run" else \
        f"for a run of {f.processes} process(es)"
    lines.append(f"<p>level {escape(level)}; detectable change {_pct(f.detectable)} ({runs}; "
                 f"tolerance {f.tolerance:.0%}); latest "
                 f"{escape(format_value(f.latest, unit)) if f.latest is not None else '-'}</p>")
    if f.blind:
        lines.append(f'<p class="blind"><b>blind spot:</b> {escape(f.blind)}</p>')
    if s.accepted:
        lines.append("<p>accepted levels:</p><ul>" + "".join(
            f"<li>{escape(short_date(a.on))}, {escape(commit_text(a.commit))}: "
            f"{escape(format_value(a.before, unit))} → {escape(format_value(a.after, unit))}"
            "</li>" for a in s.accepted) + "</ul>")
    if any(save.id is None for save in s.saves):
        lines.append('<p class="unknown">Some saves were made before baselines recorded '
                     "their date and commit: their provenance is unknown.</p>")
    return "".join(lines)


def metric_page(test: str, name: str, entries: list[Entry], sweeps: list[tuple[str, Any]],
                history: dict[str, Any]) -> str:
    """The page of one metric of one test: the sweep's rows together (one chart per machine
    and profile), then each row with its machines side by side."""
    figures: dict[str, Any] = {}
    parts = [f'<p><a href="../index.html">← every metric</a></p><h1>{escape(name)} '
             f"<small>{escape(test)}</small></h1>"]
    if sweeps:
        parts.append('<h2>Every row</h2><div class="side">')
        for i, (label, figure) in enumerate(sweeps):
            figures[f"sweep-{i}"] = figure
            parts.append(f'<div class="card"><div class="chart" id="sweep-{i}" '
                         f'aria-label="{escape(label)}"></div></div>')
        parts.append("</div>")
    rows: dict[str, list[Entry]] = {}
    for e in entries:
        rows.setdefault(e.series.record_id, []).append(e)
    for rid, group in rows.items():
        head = group[0].series
        rid_line = f'<p class="rid">{escape(rid)}</p>' if head.row else ""
        parts.append(f'<section><h2>{escape(head.row or head.test)}</h2>{rid_line}'
                     '<div class="side">')
        for e in group:
            figures[e.anchor] = history[e.anchor]
            parts.append(f'<div class="card" id="panel-{escape(e.anchor)}">'
                         f'<div class="chart" id="{escape(e.anchor)}"></div>'
                         f'<div class="about"><p class="machine">{escape(e.series.machine)} '
                         f"({escape(e.series.hardware)}), profile {escape(e.series.profile)}"
                         f"</p>{_panel_text(e)}</div></div>")
        parts.append("</div></section>")
    data = json.dumps(figures, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")
    parts.append(f'<script type="application/json" id="figures">{data}</script>')
    return _shell(f"{name} · {test}", "".join(parts), "../", ("plotly.min.js",))
