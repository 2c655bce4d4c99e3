"""The history dashboard (python -m pytest_hpml dashboard): built from baseline files made by
the store, its numbers the comparison engine's, files it cannot use named in one line each
while the rest is built, and the folder it writes kept safe. The browser's view of the site
is tests/test_dashboard_browser.py."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from dashboard_testing import (
    ACCEPT_AT,
    ELSEWHERE,
    SAVES,
    SWEEP,
    commit_of,
    family_of,
    make_history,
    records_of,
    series_count,
)
from hpml_testing import HERE

from pytest_hpml import cli
from pytest_hpml.compare import baselines, results_files, verdicts
from pytest_hpml.report import files
from pytest_hpml.report.dashboard import charts, judging, series, site
from pytest_hpml.results import Replicates

pytest.importorskip("plotly", reason="the dashboard extra: pip install 'pytest-hpml[dashboard]'")


def _series(found: series.Found, rid: str, machine: str | None = None) -> series.Series:
    return next(s for s in found.series if s.record_id == rid
                and (machine is None or s.machine == machine))


def _figures(path: Path) -> dict:
    text = path.read_text()
    return json.loads(re.search(r'id="figures">(.*?)</script>', text, re.S).group(1))


def test_a_history_is_read_save_by_save_with_dates_and_commits(tmp_path: Path) -> None:
    found = series.read([make_history(tmp_path)])
    assert found.problems == [] and len(found.series) == series_count()
    sweep = _series(found, "test_sweep.py::test_k[k=10]")
    assert (sweep.test, sweep.row, sweep.lab) == ("test_sweep.py::test_k", "k=10", "test_sweep")
    assert [s.commit for s in sweep.saves] == [commit_of(i) for i in range(SAVES)]
    assert [s.on[:10] for s in sweep.saves] == [f"2026-05-{i + 1:02d}" for i in range(SAVES)]
    assert all(len(s.values) == 3 for s in sweep.saves)
    tok = _series(found, "test_tok.py::test_tok")
    # The accepted change restarted the history: the saves from it on, and the level before.
    assert len(tok.saves) == SAVES - ACCEPT_AT
    [level] = tok.accepted
    assert level.commit == commit_of(ACCEPT_AT) and level.save == tok.saves[0].id
    assert level.before == pytest.approx(2e-4, rel=0.02)


def test_the_latest_verdict_is_the_one_a_comparison_gives(tmp_path: Path) -> None:
    """The dashboard's verdict of the latest save is --hpml-compare's verdict of that save's
    run against the baseline as it stood before it (two files: before and after)."""
    before = make_history(tmp_path / "before", saves=SAVES - 1)
    after = make_history(tmp_path / "after", saves=SAVES)
    rid = "test_sweep.py::test_k[k=1]"
    shown = judging.figures(_series(series.read([after]), rid), judging.Rules())
    run = next(r for r in records_of(SAVES - 1) if r.id == rid)
    compared = next(r for r in results_files.compare_results(before, [run]) if r.id == rid)
    verdict = compared.verdict("time")
    assert shown.verdict_from == "save"
    assert (shown.verdict.outcome, shown.verdict.change, shown.verdict.mdc) == (
        verdict.outcome, pytest.approx(verdict.change), pytest.approx(verdict.mdc))
    assert shown.verdict.basis == verdict.basis


def test_a_tests_rows_are_judged_together_as_a_comparison_of_the_run_judges_them(
        tmp_path: Path) -> None:
    """The rows of one test that record one metric are one family when --hpml-compare judges
    the run (they share the test's alpha): the dashboard judges the latest save's rows the
    same way, not each as if it were the test's only row."""
    before = make_history(tmp_path / "before", saves=SAVES - 1, records=family_of)
    after = make_history(tmp_path / "after", saves=SAVES, records=family_of)
    found = series.read([after])
    rules = judging.Rules()
    judged = judging.save_verdicts(found.series, rules)
    compared = results_files.compare_results(before, family_of(SAVES - 1))
    assert len(compared) == 4
    for row in compared:
        shown = judging.figures(_series(found, row.id), rules, judged)
        verdict = row.verdict("time")
        assert shown.verdict_from == "save"
        assert (shown.verdict.outcome, shown.verdict.change, shown.verdict.mdc,
                shown.verdict.basis) == (verdict.outcome, pytest.approx(verdict.change),
                                         pytest.approx(verdict.mdc), verdict.basis)
        # Judged as the only row of its test, it would say other than the comparison.
        alone = judging.figures(_series(found, row.id), rules).verdict
        assert (alone.mdc, alone.basis) != (pytest.approx(verdict.mdc), verdict.basis)


def test_blind_spots_accepted_levels_and_first_saves_are_said(tmp_path: Path) -> None:
    found = series.read([make_history(tmp_path)])
    rules = judging.Rules()
    noisy = judging.figures(_series(found, "test_noise.py::test_noisy"), rules)
    assert noisy.blind and "cannot detect" in noisy.blind and noisy.detectable > 0.5
    steady = judging.figures(_series(found, "test_sweep.py::test_k[k=1]"), rules)
    assert steady.blind is None and steady.detectable < 0.5
    # A noise estimate below the tolerance: the tolerance is what a verdict can see.
    assert steady.detectable == pytest.approx(rules.tolerance)
    one = series.read([make_history(tmp_path / "one", saves=1)])
    assert judging.figures(one.series[0], rules).outcome == "first save"
    accepted = series.read([make_history(tmp_path / "acc", saves=ACCEPT_AT + 1)])
    tok = judging.figures(_series(accepted, "test_tok.py::test_tok"), rules)
    assert tok.outcome == "accepted (improved)" and tok.change == pytest.approx(-0.5, abs=0.02)


def test_a_history_chart_has_a_point_per_save_and_the_band_of_its_level(tmp_path: Path
                                                                        ) -> None:
    found = series.read([make_history(tmp_path)])
    s = _series(found, "test_tok.py::test_tok")
    f = judging.figures(s, judging.Rules())
    figure = charts.history_figure(s, f)
    traces = {t["name"]: t for t in figure["data"]}
    saves = traces["save (median)"]
    assert len(saves["x"]) == len(s.saves) and len(traces["processes"]["x"]) == 3 * len(s.saves)
    assert f"commit {commit_of(ACCEPT_AT)[:10]}" in saves["text"][0]  # the first save since
    band = traces[f"detectable change ±{f.detectable:.1%}"]
    factor = 1e-6  # the chart is in us
    assert max(band["y"]) == pytest.approx(f.level * (1 + f.detectable) / factor)
    assert min(band["y"]) == pytest.approx(f.level * (1 - f.detectable) / factor)
    jump = traces["accepted changes"]
    assert commit_of(ACCEPT_AT)[:10] in jump["text"][0]
    assert figure["layout"]["yaxis"]["type"] == "linear"
    # Every row of the sweep on one chart, in log axes: its times span two decades.
    rows = [x for x in found.series if x.test == "test_sweep.py::test_k"]
    [sweep] = charts.sweep_figures(rows)
    assert [t["name"] for t in sweep["data"]] == list(SWEEP)
    assert sweep["layout"]["yaxis"]["type"] == "log"


def test_the_site_shows_every_metric_of_every_machine_and_names_what_it_left_out(
        tmp_path: Path) -> None:
    here = make_history(tmp_path / "b")
    make_history(tmp_path / "b", facts=ELSEWHERE, scale=0.1, machine=1)  # a second machine
    damaged = tmp_path / "b" / "2-quick.json"
    damaged.write_text('{"schema": "pytest-hpml/baseline/2", "records": [')
    missing = tmp_path / "nowhere.json"
    out = io.StringIO()
    err = io.StringIO()
    sys_err, sys.stderr = sys.stderr, err
    try:
        code = cli.main(["dashboard", str(tmp_path / "b"), str(missing), "-o",
                         str(tmp_path / "site")], out=out)
    finally:
        sys.stderr = sys_err
    assert code == 0, err.getvalue()
    lines = err.getvalue().splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"dashboard: left out {missing}: no such file")
    assert lines[1].startswith(f"dashboard: left out {damaged}: is not valid JSON")
    assert out.getvalue().startswith(f"dashboard: {2 * series_count()} metric(s) of 3 test(s) "
                                     "on 2 machine(s)")
    index = (tmp_path / "site" / "index.html").read_text()
    assert index.count("<tr data-lab") == 2 * series_count()
    assert f"{damaged}: is not valid JSON" in index  # the banner says it too
    page = next((tmp_path / "site" / "metrics").glob("test-k-time-*.html"))
    figures = _figures(page)
    # The sweep's rows together, once per machine, then each row with both machines.
    assert sum(k.startswith("sweep-") for k in figures) == 2
    html = page.read_text()
    for section in re.findall(r"<section>(.*?)</section>", html, re.S):
        assert section.count('class="card"') == 2
    assert (tmp_path / "site" / "plotly.min.js").stat().st_size > 1_000_000
    assert "cdn" not in html.lower() and "https://" not in html
    assert here.exists()


def test_files_of_older_versions_show_their_provenance_as_unknown(tmp_path: Path) -> None:
    path = make_history(tmp_path)
    document = json.loads(path.read_text())
    del document["saves"]
    for m in (m for r in document["records"] for m in r["metrics"]):
        m.pop("history_save_ids", None)
        for level in m.get("accepted") or []:
            level.pop("save")
    path.write_text(json.dumps(document))
    found = series.read([path])
    s = _series(found, "test_tok.py::test_tok")
    assert all(save.id is None and save.commit is None for save in s.saves)
    figure = charts.history_figure(s, judging.figures(s, judging.Rules()))
    saves = next(t for t in figure["data"] if t["name"] == "save (median)")
    assert "commit unknown" in saves["text"][0] and "unknown provenance" in saves["text"][0]
    built = site.build([path], tmp_path / "site")
    assert built.metrics == series_count() and "provenance unknown" in (
        tmp_path / "site" / "index.html").read_text()


def test_a_report_gives_the_latest_verdict_and_its_reason(tmp_path: Path) -> None:
    path = make_history(tmp_path)
    slower = [r for r in records_of(SAVES) if r.id == "test_sweep.py::test_k[k=100]"]
    slower[0].metrics[0].value *= 1.5
    slower[0].replicates["time"] = Replicates(tuple(
        v * 1.5 for v in slower[0].replicates["time"].values))
    compared = results_files.compare_results(path, slower)
    report = files.write_report(tmp_path / "run.json", compared, HERE, "quick",
                                "Comparison with baseline")
    found = series.read([path], [report])
    s = _series(found, "test_sweep.py::test_k[k=100]")
    f = judging.figures(s, judging.Rules())
    assert f.verdict_from == "run" and f.outcome == "regressed"
    assert f.verdict.basis == compared[0].verdict("time").basis
    assert f.detectable == compared[0].verdict("time").mdc
    site.build([path], tmp_path / "site", [report])
    page = next((tmp_path / "site" / "metrics").glob("test-k-time-*.html")).read_text()
    assert "regressed" in page and "the latest run&#x27;s verdict" in page
    run = next(t for t in _figures(next((tmp_path / "site" / "metrics").glob(
        "test-k-time-*.html"))).values() for t in t["data"] if t["name"] == "latest run")
    assert re.search(r"regressed \+50\.\d% against the level", run["text"][0])
    bad = tmp_path / "bad.json"
    bad.write_text("[]")
    assert series.read([path], [bad]).problems[0].startswith(f"{bad}: not a pytest-hpml JSON")


def test_text_from_the_files_is_escaped(tmp_path: Path) -> None:
    from pytest_hpml.results import Metric, Record

    path = tmp_path / "b.json"
    evil = 'test_x.py::test_x[<script>alert("x")</script>]'
    baselines.save(path, HERE, "quick", [Record(evil, "e", metrics=[Metric("t", 1.0, "s")])])
    site.build([path], tmp_path / "site")
    index = (tmp_path / "site" / "index.html").read_text()
    assert "<script>alert" not in index and "&lt;script&gt;alert" in index
    page = next((tmp_path / "site" / "metrics").glob("*.html")).read_text()
    assert "<script>alert" not in page and "</script>alert" not in page


def test_the_site_folder_is_replaced_whole_and_only_when_a_build_made_it(tmp_path: Path
                                                                         ) -> None:
    path = make_history(tmp_path)
    out = tmp_path / "site"
    site.build([path], out)
    stale = out / "metrics" / "gone-00000000.html"
    stale.write_text("a metric that is no longer in the baselines")
    site.build([path], out)
    assert not stale.exists() and (out / "index.html").exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(site.DashboardError, match="is not a pytest-hpml dashboard"):
        site.build([path], mine)
    assert (mine / "notes.txt").read_text() == "keep me"
    # Nothing left beside them: no staging folder, no earlier build.
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock")) == [
        ".gitignore", "0-quick.json", "mine", "site"]


def test_without_plotly_the_command_says_how_to_install_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    path = make_history(tmp_path, saves=1)
    monkeypatch.setitem(sys.modules, "plotly.offline", None)  # import fails
    assert cli.main(["dashboard", str(path), "-o", str(tmp_path / "site")]) == 2
    assert "pip install 'pytest-hpml[dashboard]'" in capsys.readouterr().err
    assert not (tmp_path / "site").exists()


def test_nothing_readable_is_exit_status_1(tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    assert cli.main(["dashboard", str(tmp_path / "none.json"), "-o",
                     str(tmp_path / "site")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_a_damaged_history_is_the_loaders_error(tmp_path: Path) -> None:
    path = make_history(tmp_path, saves=2)
    document = json.loads(path.read_text())
    document["records"][0]["metrics"][0]["history_save_ids"] = ["nope", "nope"]
    path.write_text(json.dumps(document))
    found = series.read([path])
    assert found.series == [] and "names save 'nope'" in found.problems[0]
    assert verdicts.DEFAULT_MAX_DETECTABLE == judging.Rules().max_detectable


def test_the_sites_own_scripts_ship_with_the_package() -> None:
    import tomllib
    from hpml_testing import ROOT

    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = data["package-data"]["pytest_hpml.report.dashboard"]
    folder = ROOT / "pytest_hpml" / "report" / "dashboard"
    assets = {p.name for p in folder.iterdir() if p.suffix in (".js", ".css")}
    assert assets == set(site.ASSETS)
    assert all(any(Path(a).match(p) for p in patterns) for a in assets)
