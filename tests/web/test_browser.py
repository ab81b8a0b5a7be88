"""The browser view and the API docs in a real browser: Debian's Chromium, headless, driven by selenium.

A real `tileplan serve` with a few requests solved (a layer list and a whole ONNX model); the pages must render
with their charts, sort, page, link to each other and to the JSON/Timeloop/module endpoints, run without a
single CSP violation (they have no scripts), and the API docs must come up without the network.

`.ci/run` installs chromium and chromium-driver; elsewhere, without them, these tests skip with the reason (in
CI they fail). TILEPLAN_SCREENSHOTS=docs/screenshots writes the README's screenshots there.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "service"))
from service_procs import start_api

REPO = Path(__file__).resolve().parents[2]
CHROMIUM, DRIVER = shutil.which("chromium"), shutil.which("chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000")

LAYERS = [
    {"name": "conv1", "op": "conv2d", "in_channels": 3, "out_channels": 32, "in_h": 32, "in_w": 32, "kernel": 3,
     "padding": 1},
    {"name": "conv2", "op": "conv2d", "in_channels": 32, "out_channels": 64, "in_h": 16, "in_w": 16, "kernel": 3,
     "padding": 1, "count": 2},
    {"name": "proj", "op": "matmul", "M": 64, "K": 256, "N": 128},
]


def _driver(profile: Path) -> Any:
    if not (CHROMIUM and DRIVER):
        why = "chromium and chromium-driver are not installed (apt-get install chromium chromium-driver)"
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for flag in FLAGS:
        opts.add_argument(flag)
    opts.add_argument(f"--user-data-dir={profile}")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(options=opts, service=Service(DRIVER))


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A served cache holding a solved layer list and a solved model."""
    from test_workload_onnx import quantized_cnn

    api = start_api(tmp_path_factory.mktemp("browser"), solvers=1)
    try:
        with httpx.Client(base_url=api.url, timeout=300) as c:
            r = c.post("/schedule", json={"hardware": "gemmini-16x16", "layers": LAYERS,
                                          "options": {"time_limit_s": 2}})
            assert r.status_code == 200, r.text
            import base64

            r = c.post("/schedule", json={"hardware": "gemmini-16x16", "options": {"time_limit_s": 2},
                                          "model": base64.b64encode(quantized_cnn()).decode()})
            assert r.status_code == 200, r.text
        yield api.url
    finally:
        api.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    driver = _driver(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.quit()


def shot(browser: Any, name: str, tmp_path: Path) -> None:
    """A screenshot: into TILEPLAN_SCREENSHOTS (the README's) when set, else next to the test's files."""
    where = Path(os.environ.get("TILEPLAN_SCREENSHOTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    body = browser.find_element("tag name", "body")
    browser.set_window_size(1400, min(max(body.size["height"] + 120, 600), 2600))
    assert browser.save_screenshot(str(where / f"{name}.png"))
    assert (where / f"{name}.png").stat().st_size > 10_000


def no_csp_violations(browser: Any) -> None:
    logs = [e["message"] for e in browser.get_log("browser")]
    assert not [m for m in logs if "Content Security Policy" in m or "Refused to" in m], logs


def cells(browser: Any, table: str, column: int) -> list[str]:
    return [td.text for td in browser.find_elements("css selector", f"#{table} tbody tr td:nth-child({column})")]


def number(text: str) -> float:
    return float(text.split()[0].replace(",", "").rstrip("\u00d7"))


def test_listing_sorts_pages_and_counts(site: str, browser: Any, tmp_path: Path) -> None:
    browser.get(site + "/")
    assert browser.title.startswith("Cached plans")
    rows = browser.find_elements("css selector", "#plans tbody tr")
    assert len(rows) == 6  # 3 layers and the model's 3, every plan once
    assert "6 plans in the cache" in browser.find_element("id", "count").text
    shot(browser, "plans", tmp_path)
    no_csp_violations(browser)

    browser.find_element("link text", "Cycles").click()  # sort by cycles, largest first
    assert "sort=cycles" in browser.current_url
    got = [number(t) for t in cells(browser, "plans", 4)]
    assert got == sorted(got, reverse=True) and len(got) == 6
    browser.find_element("partial link text", "Cycles").click()  # again: smallest first
    got = [number(t) for t in cells(browser, "plans", 4)]
    assert got == sorted(got)
    browser.find_element("partial link text", "Speed-up").click()
    speedups = [number(t) for t in cells(browser, "plans", 6)]
    assert speedups == sorted(speedups, reverse=True) and all("vs gemmini-auto" in t for t in cells(browser, "plans", 6))

    browser.get(site + "/?op=conv2d&limit=2")  # a filtered count, and previous / next pages
    assert "of 6 plans match these filters" in browser.find_element("id", "count").text
    seen = [a.text for a in browser.find_elements("css selector", "#plans tbody td:first-child a")]
    browser.find_element("css selector", "a[rel=next]").click()
    assert "page=2" in browser.current_url and "op=conv2d" in browser.current_url
    seen += [a.text for a in browser.find_elements("css selector", "#plans tbody td:first-child a")]
    browser.find_element("css selector", "a[rel=prev]").click()
    assert "page=" not in browser.current_url
    assert len(seen) == len(set(seen)) >= 3


def test_plan_page_charts_nests_and_links(site: str, browser: Any, tmp_path: Path) -> None:
    browser.get(site + "/?sort=layer&order=asc")
    browser.find_element("link text", "conv2").click()
    assert "/ui/plans/" in browser.current_url and browser.find_element("tag name", "h1").text.startswith("conv2")
    for kind in ("breakdown", "fill"):
        svg = browser.find_element("css selector", f"figure[data-chart={kind}] svg")
        assert svg.size["width"] > 300 and svg.size["height"] > 40
        assert len(svg.find_elements("css selector", "rect")) >= 2
    parts = {r.get_attribute("class") for r in browser.find_elements("css selector", "figure[data-chart=breakdown] rect")}
    assert "compute" in parts
    plan, base = browser.find_element("id", "nest-plan"), browser.find_element("id", "nest-baseline")
    assert plan.location["x"] < base.location["x"] and abs(plan.location["y"] - base.location["y"]) < 5  # side by side
    assert "<< compute >>" in plan.text and "DRAM" in base.text
    legend = {dt.text for dt in browser.find_elements("css selector", "#legend dt")}
    assert {"K", "C", "P", "Q", "R", "S"} <= legend
    shot(browser, "plan", tmp_path)
    no_csp_violations(browser)

    here = browser.current_url
    for label, check in (("Plan JSON", '"mapping"'), ("Module: C", "gemmini.h")):  # shown in the browser
        browser.find_element("link text", label).click()
        assert check in browser.find_element("tag name", "body").text, label
        browser.get(here)
    for label, kind in (("Timeloop mapping", "application/yaml"), ("Module: tar", "application/x-tar")):  # saved
        r = httpx.get(browser.find_element("link text", label).get_attribute("href"), timeout=120)
        assert r.status_code == 200 and r.headers["content-type"].startswith(kind), label


def test_requests_and_models_as_groups(site: str, browser: Any, tmp_path: Path) -> None:
    browser.get(site + "/")
    browser.find_element("link text", "Models").click()
    rows = browser.find_elements("css selector", "#requests tbody tr")
    assert len(rows) == 1 and "model" in rows[0].text
    browser.find_element("link text", "Requests").click()
    assert len(browser.find_elements("css selector", "#requests tbody tr")) == 2
    browser.find_element("partial link text", "conv1").click()
    assert "/ui/requests/" in browser.current_url
    for kind in ("cycles", "speedup"):
        svg = browser.find_element("css selector", f"figure[data-chart={kind}] svg")
        assert len(svg.find_elements("css selector", "rect")) >= 3
    assert "(each layer times its count)" in browser.find_element("tag name", "main").text
    shot(browser, "request", tmp_path)
    no_csp_violations(browser)
    browser.find_element("css selector", "#layers a").click()  # a layer of the group leads to its plan page
    assert "/ui/plans/" in browser.current_url and "name=conv1" in browser.current_url
    assert browser.find_element("tag name", "h1").text.startswith("conv1")


def test_api_docs_work_offline(site: str, browser: Any, tmp_path: Path) -> None:
    browser.get(site + "/docs")
    end = time.monotonic() + 30
    while time.monotonic() < end and not browser.find_elements("css selector", ".opblock"):
        time.sleep(0.2)
    ops = browser.find_elements("css selector", ".opblock-summary-path")
    assert any(o.text.replace("\u200b", "") == "/schedule" for o in ops), [o.text for o in ops]
    loaded = browser.execute_script("return performance.getEntriesByType('resource').map(e => e.name)")
    assert loaded and all(u.startswith(site) for u in loaded), loaded  # nothing from a CDN
    shot(browser, "docs", tmp_path)
    no_csp_violations(browser)
    assert httpx.get(site + "/redoc").status_code == 404  # not served: ReDoc's bundle loads from a CDN


@pytest.fixture(scope="module")
def compiled_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A served store holding one compiled model (its own server: its plans would change the listing above)."""
    import base64

    from tileplan.frontend import zoo

    api = start_api(tmp_path_factory.mktemp("browser-compile"), solvers=1, wait_limit_s="300")
    try:
        r = httpx.post(api.url + "/compile", timeout=300, json={
            "hardware": "gemmini-16x16", "options": {"time_limit_s": 2},
            "model": base64.b64encode(zoo.build("cnn_small", "qdq", size=8)).decode()})
        assert r.status_code == 200, r.text
        yield api.url
    finally:
        api.stop()


def test_compile_page_tables_charts_and_links(compiled_site: str, browser: Any, tmp_path: Path) -> None:
    site = compiled_site
    browser.get(site + "/")
    browser.find_element("link text", "Compiles").click()  # linked from the navigation
    assert browser.current_url.endswith("/ui/compiles")
    rows = browser.find_elements("css selector", "#compiles tbody tr")
    assert len(rows) == 1 and "cnn_small" in rows[0].text and "done" in rows[0].text
    no_csp_violations(browser)
    browser.find_element("link text", "cnn_small").click()
    assert "/ui/compiles/" in browser.current_url
    assert browser.find_element("tag name", "h1").text.startswith("Model cnn_small")
    for kind in ("cycles", "emulated", "speedup"):
        svg = browser.find_element("css selector", f"figure[data-chart={kind}] svg")
        assert len(svg.find_elements("css selector", "rect")) >= 3, kind  # one bar per accelerator op
    accel = browser.find_elements("css selector", "#accelerator-ops tbody tr")
    assert [r.text.split()[0] for r in accel] == ["conv1", "conv2", "fc"]
    assert all(number(t) > 0 for t in cells(browser, "accelerator-ops", 4))  # emulated cycles
    assert all(t.endswith("\u00d7") for t in cells(browser, "accelerator-ops", 7))  # speed-up
    host = {r.text.split()[0]: r.text for r in browser.find_elements("css selector", "#host-ops tbody tr")}
    assert set(host) == {"pool", "gap", "flatten"} and "MaxPool reduces or compares values" in host["pool"]
    assert "on the host: 1 Flatten, 1 GlobalAveragePool, 1 MaxPool" in browser.find_element("tag name", "main").text
    shot(browser, "compile", tmp_path)
    no_csp_violations(browser)
    tar = httpx.get(browser.find_element("id", "artifact").get_attribute("href"), timeout=60)
    assert tar.status_code == 200 and tar.headers["content-type"] == "application/x-tar"
    browser.find_element("css selector", "#accelerator-ops tbody tr td:nth-child(3) a").click()  # the op's plan
    assert "/ui/plans/" in browser.current_url and browser.find_elements("css selector", "figure[data-chart] svg")
