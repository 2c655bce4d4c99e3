"""The dashboard as a person uses it: a real headless Chromium opens the site from disk (file://,
no server, no network), the index lists every metric, filtering and sorting work, a metric page
draws its chart with a point per save, hovering a point shows its commit, and screenshots are
taken (kept in $HPML_SCREENSHOTS when set, else in the test's temporary folder).

Needs Chromium and its driver (Debian: apt-get install chromium chromium-driver) and selenium
(the dev extra: pip install -e '.[dev]'); skipped, saying so, without them. HPML_CHROMIUM and
HPML_CHROMEDRIVER name other binaries (a missing path: the skip)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from dashboard_testing import ACCEPT_AT, ELSEWHERE, SAVES, commit_of, make_history, series_count
from hpml_testing import HERE

from pytest_hpml.machine.fingerprint import machine_key

HERE_KEY = machine_key(HERE)  # the machine whose saves have commits commit_of(save, 0)

INSTALL = ("install it (Debian/Ubuntu: apt-get install chromium chromium-driver) and selenium "
           "(pip install -e '.[dev]'), or name them with HPML_CHROMIUM / HPML_CHROMEDRIVER")
#: Chromium as root in a container: no sandbox, no GPU, nothing fetched from the network.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                  "--no-first-run", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--window-size=1400,1000")


def find_browser(environ: dict[str, str] | os._Environ = os.environ
                 ) -> tuple[str, str] | str:
    """(chromium, chromedriver), or why the browser tests cannot run and what to do."""
    chromium = environ.get("HPML_CHROMIUM") or next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None)
    driver = environ.get("HPML_CHROMEDRIVER") or shutil.which("chromedriver")
    if not chromium or not Path(chromium).is_file():
        return f"no Chromium found ({chromium or 'not on PATH'}): {INSTALL}"
    if not driver or not Path(driver).is_file():
        return f"no chromedriver found ({driver or 'not on PATH'}): {INSTALL}"
    try:
        import selenium  # noqa: F401
    except ImportError:
        return f"selenium is not installed: {INSTALL}"
    return chromium, driver


def test_a_missing_browser_is_a_skip_that_says_how_to_install_one(tmp_path: Path) -> None:
    said = find_browser({"HPML_CHROMIUM": str(tmp_path / "no-chromium")})
    assert isinstance(said, str) and "no Chromium found" in said
    assert "apt-get install chromium chromium-driver" in said


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("plotly", reason="the dashboard extra: pip install -e '.[dashboard]'")
    from pytest_hpml.report.dashboard import site as builder

    folder = tmp_path_factory.mktemp("baselines")
    make_history(folder)
    make_history(folder, facts=ELSEWHERE, scale=0.1, machine=1)
    out = tmp_path_factory.mktemp("out") / "site"
    builder.build([folder], out)
    return out


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    found = find_browser()
    if isinstance(found, str):
        pytest.skip(found)
    chromium, driver = found
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS,
                 f"--user-data-dir={tmp_path_factory.mktemp('chromium-profile')}"):
        options.add_argument(flag)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SE_OFFLINE", "true")  # selenium's manager never downloads a driver
        chrome = webdriver.Chrome(service=Service(driver), options=options)
    try:
        yield chrome
    finally:
        chrome.quit()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kept = os.environ.get("HPML_SCREENSHOTS")
    folder = Path(kept) if kept else tmp_path_factory.mktemp("screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _visible(browser: Any) -> list[Any]:
    from selenium.webdriver.common.by import By

    return [r for r in browser.find_elements(By.CSS_SELECTOR, "#metrics tbody tr")
            if r.is_displayed()]


def test_the_index_lists_every_metric_and_filters_and_sorts(browser: Any, site: Path,
                                                            shots: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get((site / "index.html").as_uri())
    rows = _visible(browser)
    assert len(rows) == 2 * series_count()
    assert browser.find_element(By.ID, "count").text == f"{len(rows)} of {len(rows)} metrics"
    browser.save_screenshot(str(shots / "index.png"))
    # Filtering: words of the test, then one machine.
    browser.find_element(By.ID, "q").send_keys("test_k")
    assert len(_visible(browser)) == 6  # three rows of the sweep on two machines
    Select(browser.find_element(By.CSS_SELECTOR, 'select[data-filter="machine"]')
           ).select_by_index(1)
    assert len(_visible(browser)) == 3
    browser.find_element(By.ID, "q").clear()
    Select(browser.find_element(By.CSS_SELECTOR, 'select[data-filter="verdict"]')
           ).select_by_visible_text("unchanged")
    assert 0 < len(_visible(browser)) < series_count()
    assert {r.get_attribute("data-verdict") for r in _visible(browser)} == {"unchanged"}
    Select(browser.find_element(By.CSS_SELECTOR, 'select[data-filter="verdict"]')
           ).select_by_index(0)
    Select(browser.find_element(By.CSS_SELECTOR, 'select[data-filter="machine"]')
           ).select_by_index(0)
    assert len(_visible(browser)) == 2 * series_count()
    # Sorting by the latest value: by the number, not by its text.
    latest = next(h for h in browser.find_elements(By.CSS_SELECTOR, "#metrics th")
                  if h.text.startswith("latest"))
    for order in ("ascending", "descending"):
        latest.click()
        assert latest.get_attribute("aria-sort") == order
        values = [float(r.find_elements(By.TAG_NAME, "td")[7].get_attribute("data-sort"))
                  for r in _visible(browser)]
        assert values == sorted(values, reverse=order == "descending")
        assert values[0] != values[-1]
    browser.save_screenshot(str(shots / "index-sorted.png"))


def _drawn(browser: Any, selector: str) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    chart = browser.find_element(By.CSS_SELECTOR, selector)
    browser.execute_script("arguments[0].scrollIntoView()", chart)
    WebDriverWait(browser, 30).until(lambda _: chart.get_attribute("data-drawn"))
    return chart


#: The drawn markers of one trace of a plotly chart, found by the trace's name.
POINTS = """
const chart = arguments[0], name = arguments[1];
const index = chart.data.findIndex((t) => t.name === name);
const trace = chart.querySelectorAll('.scatterlayer .trace')[index];
return trace ? Array.from(trace.querySelectorAll('.points path.point')) : [];
"""


def test_a_metric_page_draws_each_save_and_hovering_shows_its_commit(
        browser: Any, site: Path, shots: Path) -> None:
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get((site / "index.html").as_uri())
    browser.find_element(By.ID, "q").send_keys("test_tok")
    [row] = [r for r in _visible(browser) if r.get_attribute("data-machine") == HERE_KEY]
    row.find_element(By.TAG_NAME, "a").click()  # as a person opens it
    WebDriverWait(browser, 10).until(lambda b: "/metrics/" in b.current_url)
    anchor = browser.current_url.split("#panel-")[1]
    chart = _drawn(browser, f'[id="{anchor}"]')
    points = browser.execute_script(POINTS, chart, "save (median)")
    # The accepted change restarted the history: the saves from it on, one point each.
    assert len(points) == SAVES - ACCEPT_AT
    ActionChains(browser).move_to_element(points[-1]).perform()
    WebDriverWait(browser, 10).until(
        lambda b: b.find_elements(By.CSS_SELECTOR, ".hoverlayer .hovertext"))
    hover = browser.find_element(By.CSS_SELECTOR, ".hoverlayer .hovertext").text
    assert f"commit {commit_of(SAVES - 1)[:10]}" in hover and "2026-05-07" in hover
    browser.save_screenshot(str(shots / "metric-hover.png"))
    # The accepted change says which commit it was.
    jump = browser.execute_script(POINTS, chart, "accepted changes")
    ActionChains(browser).move_to_element(jump[0]).perform()
    WebDriverWait(browser, 10).until(lambda b: "accepted" in b.find_element(
        By.CSS_SELECTOR, ".hoverlayer .hovertext").text)
    assert commit_of(ACCEPT_AT)[:10] in browser.find_element(
        By.CSS_SELECTOR, ".hoverlayer .hovertext").text


def test_a_sweep_is_one_chart_per_machine_and_the_machines_side_by_side(
        browser: Any, site: Path, shots: Path) -> None:
    from selenium.webdriver.common.by import By

    page = next((site / "metrics").glob("test-k-time-*.html"))
    browser.get(page.as_uri())
    for i in range(2):
        chart = _drawn(browser, f"#sweep-{i}")
        for row in ("k=1", "k=10", "k=100"):
            assert len(browser.execute_script(POINTS, chart, row)) == SAVES
        assert browser.execute_script("return arguments[0].layout.yaxis.type", chart) == "log"
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(shots / "sweep.png"))
    # Each row: one card per machine, in one line.
    section = browser.find_element(By.TAG_NAME, "section")
    cards = section.find_elements(By.CLASS_NAME, "card")
    assert len(cards) == 2 and cards[0].location["y"] == cards[1].location["y"]
