"""Building the site: every series read, judged, charted and written into a folder that opens
from disk or from any static host (gh-pages), with no server and no network:

    SITE/index.html          every metric: the sortable, filterable table
    SITE/metrics/*.html      one page per metric of a test (its rows, its machines)
    SITE/plotly.min.js       the charting code, once for the site (from the plotly package)
    SITE/dashboard.js, .css  the site's own sorting, filtering and drawing

The site is written into a new folder beside SITE and swapped in whole: a reader never sees a
half-written site, and pages of metrics that are gone do not linger. An existing SITE is only
replaced when an earlier build made it (its marker file says so)."""

from __future__ import annotations

import datetime
import hashlib
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from pytest_hpml.compare import drift_prior
from pytest_hpml.report.dashboard import charts, judging, pages, series

MARKER = ".pytest-hpml-dashboard"
ASSETS = ("dashboard.js", "dashboard.css")


class DashboardError(Exception):
    """The site cannot be built; the message says what to do."""


@dataclass
class Built:
    site: Path
    problems: list[str] = field(default_factory=list)  # files left out, one line each
    metrics: int = 0
    tests: int = 0
    pages: int = 0
    machines: list[str] = field(default_factory=list)


def plotly_js() -> str:
    """plotly.js as the plotly package ships it (no network)."""
    try:
        from plotly.offline import get_plotlyjs
    except ImportError:
        raise DashboardError("the dashboard draws its charts with plotly, which is not "
                             "installed: pip install 'pytest-hpml[dashboard]'") from None
    return get_plotlyjs()


def slug(text: str, key: str) -> str:
    """A file or anchor name for `text`, made unique by a hash of `key`."""
    readable = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")[:60] or "metric"
    return f"{readable}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"


def _entries(found: series.Found, rules: judging.Rules) -> list[pages.Entry]:
    out = []
    by_file: dict[Path, list[series.Series]] = {}
    for s in found.series:
        by_file.setdefault(s.file, []).append(s)
    for group in by_file.values():
        # Each file's metrics judged as a comparison with it would: a metric that has not
        # learned its drift assumes the one the file's metrics learned (compare/drift_prior).
        file_rules = drift_prior.with_machine_drift(
            rules, drift_prior.spread_over([s.metric for s in group]))
        judged = judging.save_verdicts(group, file_rules)
        for s in group:
            function = s.test.split("::")[-1][:40]  # the metric's name kept whole in the file's
            page = "metrics/" + slug(f"{function}-{s.name}", f"{s.test}|{s.name}")
            out.append(pages.Entry(s, judging.figures(s, file_rules, judged), page + ".html",
                                   slug(f"{s.row or 'row'}-{s.machine}", s.key)))
    out.sort(key=lambda e: (e.series.lab, e.series.test, e.series.name,
                            series.natural(e.series.row), e.series.machine, e.series.profile))
    return out



def _pages(entries: list[pages.Entry]) -> dict[str, str]:
    """Each metric page's HTML, by its path in the site."""
    by_page: dict[str, list[pages.Entry]] = {}
    for e in entries:
        by_page.setdefault(e.page, []).append(e)
    out = {}
    for path, group in by_page.items():
        history = {e.anchor: charts.history_figure(e.series, e.figures) for e in group}
        by_file: dict[tuple[str, str], list[series.Series]] = {}
        for e in group:
            by_file.setdefault((e.series.machine, e.series.profile), []).append(e.series)
        sweeps: list[tuple[str, Any]] = []
        for (machine, profile), rows in by_file.items():
            if len(rows) > 1:
                sweeps += [(f"{machine} {profile}", f) for f in charts.sweep_figures(rows)]
        head = group[0].series
        out[path] = pages.metric_page(head.test, head.name, group, sweeps, history)
    return out


def _about(found: series.Found, entries: list[pages.Entry], rules: judging.Rules) -> str:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    tests = len({(e.series.test) for e in entries})
    return (f"{len(entries)} metrics of {tests} tests from {len(found.files)} baseline "
            f"file(s), built {when}. Verdicts and detectable changes by --hpml-compare's "
            f"rules: tolerance {rules.tolerance:.0%}, alpha {rules.alpha}, drift between saves "
            f"{rules.drift:.0%} assumed until learned, blind spots beyond "
            f"±{rules.max_detectable:.0%}.")


def _swap_in(built: Path, site: Path) -> None:
    """`built` becomes `site`; an earlier build at `site` is removed."""
    if site.exists() or site.is_symlink():
        old = site.with_name(f".{site.name}.old-{built.name[-8:]}")
        site.rename(old)
        built.rename(site)
        shutil.rmtree(old, ignore_errors=True)
    else:
        built.rename(site)


def check_site_folder(site: Path) -> None:
    if site.is_file() or (site.is_dir() and any(site.iterdir())
                          and not (site / MARKER).exists()):
        raise DashboardError(f"{site} exists and is not a pytest-hpml dashboard: give -o a "
                             "new or empty folder (a build replaces the whole folder)")


def build(paths: list[Path], out: Path, reports: list[Path] = (),
          rules: judging.Rules | None = None) -> Built:
    """Build the site into `out` from the baseline files (or folders of them) in `paths` and
    the latest runs' JSON reports in `reports`."""
    rules = rules or judging.Rules()
    out = Path(out)
    check_site_folder(out)
    script = plotly_js()
    found = series.read(list(paths), list(reports))
    entries = _entries(found, rules)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        (staging / "metrics").mkdir()
        for path, html in _pages(entries).items():
            (staging / path).write_text(html, encoding="utf-8")
        (staging / "index.html").write_text(
            pages.index_page(entries, found.problems, _about(found, entries, rules)),
            encoding="utf-8")
        (staging / "plotly.min.js").write_text(script, encoding="utf-8")
        for name in ASSETS:
            text = resources.files("pytest_hpml.report.dashboard").joinpath(name).read_text(
                encoding="utf-8")
            (staging / name).write_text(text, encoding="utf-8")
        (staging / MARKER).write_text("built by python -m pytest_hpml dashboard\n")
        staging.chmod(0o755)
        _swap_in(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Built(out, found.problems, len(entries), len({e.series.test for e in entries}),
                 len({e.page for e in entries}),
                 sorted({e.series.machine for e in entries}))
