"""report.html in a real headless browser (Debian's chromium through selenium, no download): every
image loads, the console stays clean, and a screenshot can be taken."""

from __future__ import annotations

from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

pytestmark = pytest.mark.skipif(not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()),
                                reason="Debian's chromium and chromium-driver are not installed")


@pytest.fixture()
def browser(tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--no-first-run", "--window-size=1280,2000",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def test_report_html_in_chromium(tmp_path, browser, conversion, profile_json):
    from albert_edge.report import write_report

    result = write_report([conversion, profile_json], tmp_path / "r")
    browser.get(result.html.resolve().as_uri())
    images = browser.find_elements("tag name", "img")
    assert len(images) == len(result.data["charts"]) >= 4
    for image in images:
        loaded = browser.execute_script("return arguments[0].complete && arguments[0].naturalWidth", image)
        assert loaded and loaded > 0, image.get_attribute("alt")
    headings = [h.text for h in browser.find_elements("tag name", "h2")]
    assert any("Model files" in h for h in headings) and any("Latency" in h for h in headings)
    errors = [entry for entry in browser.get_log("browser") if entry["level"] in ("SEVERE", "WARNING")]
    assert errors == []
    height = browser.execute_script("return document.body.scrollHeight")
    browser.set_window_size(1280, min(max(height, 800), 8000))
    shot = tmp_path / "report.png"
    assert browser.save_screenshot(str(shot)) and shot.stat().st_size > 10_000
