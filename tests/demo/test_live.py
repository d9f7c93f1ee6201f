"""The demo as a person meets it: a real server (uvicorn in a child process on a free loopback
port) under a short load test, and its page in headless Chromium."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from albert_edge.demo.loadtest import LoadTestOptions, run_load_test

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = "/usr/bin/chromedriver"


def test_short_load_test_has_no_errors_but_deliberate_503s(server):
    """8 clients against a queue of 2 for 3 s: every reply is a 200 or a 503, never an error."""
    result = run_load_test(LoadTestOptions(url=server.url, clients=8, seconds=3, warmup=5))
    assert result["errors"] == 0, result
    assert set(result["codes"]) <= {"200", "503"} and result["codes"]["200"] > 20
    assert result["latency_ms"]["p50"] <= result["latency_ms"]["p99"]
    assert abs(result["rss_change"]) < 0.10  # no leak: resident memory within 10% of before
    assert server.proc.poll() is None  # still serving


@pytest.mark.skipif(CHROMIUM is None or not Path(CHROMEDRIVER).exists(),
                    reason="needs Debian's chromium and chromium-driver (apt install chromium chromium-driver)")
def test_page_in_headless_chromium(server, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--no-first-run", "--disable-dev-shm-usage",
                f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1280,900"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    try:
        driver.set_page_load_timeout(30)
        driver.get(server.url + "/")
        wait = WebDriverWait(driver, 30)
        box = driver.find_element(By.ID, "text")
        box.clear()
        box.send_keys("Parse the email message and return its headers.")
        driver.find_element(By.ID, "classify").click()
        label = wait.until(lambda d: d.find_element(By.ID, "class-label").text)
        assert label in server.status["labels"]
        latency = driver.find_element(By.ID, "class-latency").text
        assert latency.endswith(" ms") and float(latency.split()[0]) > 0

        box.clear()
        box.send_keys("The event ___ runs the tasks.")
        driver.find_element(By.ID, "fill").click()
        filled = wait.until(lambda d: d.find_element(By.ID, "mask-filled").text)
        assert "___" not in filled and driver.find_element(By.ID, "mask-latency").text.endswith(" ms")

        # Switch to TFLite live and answer again with it.
        driver.find_element(By.CSS_SELECTOR, "#format-switch label:nth-child(2)").click()
        wait.until(lambda d: "now tflite-int8" in d.find_element(By.ID, "switch-state").text)
        driver.find_element(By.ID, "classify").click()
        wait.until(lambda d: "tflite-int8" in d.find_element(By.ID, "class-result").text)
        assert not driver.find_elements(By.ID, "class-passes")  # a full-depth file runs every pass
        # The classifier that stops early: its answer says how many passes it ran.
        driver.find_element(By.ID, "adaptive-choice").click()
        wait.until(lambda d: "now tflite-adaptive" in d.find_element(By.ID, "switch-state").text)
        driver.find_element(By.ID, "classify").click()
        passes = wait.until(lambda d: d.find_elements(By.ID, "class-passes") and d.find_element(By.ID, "class-passes").text)
        assert re.fullmatch(r"[12] of 2 passes", passes), passes
        wait.until(lambda d: "passes (held out)" in d.find_element(By.ID, "running").text)
        # The running panel shows p50/p90, memory and the device.
        wait.until(lambda d: "p50 / p90" in d.find_element(By.ID, "running").text)
        running = driver.find_element(By.ID, "running").text
        assert "memory rss / peak" in running and "MiB" in running and "ai_edge_litert" in running
        assert driver.find_element(By.ID, "device").text.strip()
        shot = tmp_path / "demo-screenshot.png"
        assert driver.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        driver.quit()
