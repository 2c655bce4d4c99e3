"""How long the dashboard takes for a large history: a baseline of --metrics metrics (sweeps of
--rows rows) with --saves saves, made by pytest runs of a generated suite with
--hpml-save-baseline (the values are made up, as a function of the save: the figures timed are
the dashboard's, not a machine's; making the history takes minutes and is not timed), then

- the build, as a user runs it: `python -m pytest_hpml dashboard BASELINE -o SITE` (wall time
  of the command, Python's start and imports included), best and median of --repeat;
- the index opened from disk in headless Chromium: the navigation's load event (HTML parsed,
  styles and scripts run, the table laid out), best and median of --repeat fresh loads;
- a metric page: from navigation to its first chart drawn by plotly.js.

    python tools/dashboard_timing.py                     # 30 saves x 500 metrics
    python tools/dashboard_timing.py --saves 30 --metrics 500 --repeat 5

Chromium: HPML_CHROMIUM / HPML_CHROMEDRIVER, else chromium and chromedriver on the PATH.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The suite whose saves make the history: TESTS test functions, each a sweep of ROWS rows, whose
#: values are a function of the save (SAVE, read from save.txt): rows spanning decades, some
#: tests twice as fast from save 20 on (accepted by that save), a few whose samples spread so
#: widely that no change under 50 % can be seen (blind spots).
SUITE = """
import math
from pathlib import Path

import pytest

SAVE = int(Path(__file__).with_name("save.txt").read_text())


def value(t, n):
    base = 1e-6 * 10 ** (n % 4) * (1 + t % 7)
    if t % 10 == 3 and SAVE >= 20:
        base *= 0.5
    return base * (1 + 0.02 * math.sin(SAVE * 1.7 + t + n))


def record(hpml, t, n):
    v = value(t, n)
    spread = 0.6 if t % 25 == 7 else 0.002
    hpml.record("time", v, unit="s", samples=[v * (1 + spread * (k - 4.5) / 4.5)
                                              for k in range(10)])
"""


def make_project(folder: Path, metrics: int, rows: int) -> Path:
    project = folder / "project"
    project.mkdir()
    (project / "pytest.ini").write_text("[pytest]\n")
    tests = [SUITE]
    for t in range(metrics // rows):
        tests.append(f"\n@pytest.mark.parametrize('n', range({rows}))\n"
                     f"def test_t{t}(hpml, n):\n    record(hpml, {t}, n)\n")
    (project / "test_timing.py").write_text("".join(tests))
    return project


def make_history(project: Path, saves: int, env: dict[str, str]) -> Path:
    """`saves` saves of the suite, one process each (the store keeps 30 values per metric:
    30 saves of one process, or 10 of three)."""
    for s in range(saves):
        (project / "save.txt").write_text(str(s))
        subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--hpml-profile=quick", "--hpml-save-baseline",
                        "--hpml-baseline-processes=1", "--hpml-baselines=baselines"],
                       cwd=project, env=env, check=True, stdout=subprocess.DEVNULL)
    [baseline] = (project / "baselines").glob("*.json")
    return baseline


def time_build(baseline: Path, site: Path, repeat: int, env: dict[str, str]) -> list[float]:
    took = []
    for _ in range(repeat):
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest_hpml", "dashboard", str(baseline), "-o",
                        str(site)], check=True, env=env, stdout=subprocess.DEVNULL)
        took.append(time.perf_counter() - started)
    return took


def time_browser(site: Path, repeat: int, profile: Path) -> tuple[list[float], list[float]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chromium = os.environ.get("HPML_CHROMIUM") or shutil.which("chromium")
    driver = os.environ.get("HPML_CHROMEDRIVER") or shutil.which("chromedriver")
    if not chromium or not driver:
        sys.exit("no Chromium: apt-get install chromium chromium-driver")
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--window-size=1400,1000",
                 f"--user-data-dir={profile}"):
        options.add_argument(flag)
    os.environ["SE_OFFLINE"] = "true"
    browser = webdriver.Chrome(service=Service(driver), options=options)
    index, page = [], []
    try:
        first_page = sorted((site / "metrics").glob("*.html"))[0]
        for _ in range(repeat):
            browser.get("about:blank")
            browser.get((site / "index.html").as_uri())
            index.append(browser.execute_script(
                "return performance.getEntriesByType('navigation')[0].loadEventEnd") / 1000)
            rows = len(browser.find_elements(By.CSS_SELECTOR, "#metrics tbody tr"))
            browser.get("about:blank")
            browser.get(first_page.as_uri())
            chart = browser.find_element(By.CSS_SELECTOR, ".chart")
            WebDriverWait(browser, 60).until(
                lambda _, chart=chart: chart.get_attribute("data-drawn"))
            # The page notes when plotly.js finished the chart (ms since the navigation).
            page.append(float(chart.get_attribute("data-drawn")) / 1000)
        print(f"index rows: {rows}")
    finally:
        browser.quit()
    return index, page


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--saves", type=int, default=30)
    parser.add_argument("--metrics", type=int, default=500)
    parser.add_argument("--rows", type=int, default=5, help="rows per sweep")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="hpml-dashboard-timing-") as tmp:
        folder = Path(tmp)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
        started = time.perf_counter()
        project = make_project(folder, args.metrics, args.rows)
        baseline = make_history(project, args.saves, env)
        print(f"baseline: {args.saves} saves x {args.metrics} metrics by pytest runs, "
              f"{baseline.stat().st_size / 1e6:.1f} MB, in "
              f"{time.perf_counter() - started:.0f} s (not timed below)", flush=True)
        site = folder / "site"
        build = time_build(baseline, site, args.repeat, env)
        pages = len(list((site / "metrics").glob("*.html")))
        size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file()) / 1e6
        index, page = time_browser(site, args.repeat, folder / "profile")
    print(f"site: {pages} metric pages, {size:.1f} MB (plotly.min.js included)\n")
    print("| step | best | median | runs |\n| --- | --- | --- | --- |")
    for name, values in (("build (python -m pytest_hpml dashboard)", build),
                         ("index opened in Chromium (load event)", index),
                         ("metric page: first chart drawn", page)):
        print(f"| {name} | {min(values):.2f} s | {statistics.median(values):.2f} s "
              f"| {len(values)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
