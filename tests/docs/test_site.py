"""The site builds with ``mkdocs build --strict``; an error page renders and search finds a code (Chromium)."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvcanary import codes
from tests.docs._webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[2]
SKIP_ENV = "KVCANARY_SKIP_BROWSER"


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)], cwd=ROOT, check=False,
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out


@pytest.fixture(scope="session")
def server(site: Path) -> Iterator[str]:
    handler = functools.partial(_Quiet, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        pass


def test_every_code_has_a_built_page(site: Path) -> None:
    for code in codes.by_code():
        assert (site / "errors" / code / "index.html").is_file(), code
    index = json.loads((site / "search" / "search_index.json").read_text())
    titles = {d["title"].split(":")[0] for d in index["docs"] if d["location"].startswith("errors/KVC-")}
    assert titles >= set(codes.by_code())
    export = json.loads((site / "contracts.json").read_text())
    assert export["format"] == "kvcanary-contracts/1"
    for page in ("support-matrix", "benchmarks", "contracts", "quickstart", "concepts", "integration"):
        assert (site / page / "index.html").is_file(), page


def _browser() -> tuple[str, str]:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    if browser and driver:
        return browser, driver
    missing = "chromium" if not browser else "chromedriver"
    if os.environ.get(SKIP_ENV) == "1" and os.environ.get("CI", "").lower() not in ("1", "true"):
        pytest.skip(f"{missing} not installed and {SKIP_ENV}=1")
    pytest.fail(f"{missing} is not installed (apt-get install chromium chromium-driver); "
                f"outside CI, {SKIP_ENV}=1 skips this test")


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    chromium, chromedriver = _browser()
    driver = WebDriver(chromedriver, chromium, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.close()


def test_an_error_page_renders(browser: WebDriver, server: str) -> None:
    code = sorted(codes.by_code())[0]
    browser.get(f"{server}/errors/{code}/")
    h1 = browser.wait_for("const h = document.querySelector('article h1'); return h && h.textContent;")
    assert isinstance(h1, str) and h1.startswith(f"{code}: ")
    headings = browser.run("return [...document.querySelectorAll('article h2')].map(h => h.id)")
    assert headings == ["the-message", "what-it-means", "when-it-happens", "how-to-fix-it", "example",
                        "related-errors", "where-it-is-declared"]
    blocks = browser.run("return document.querySelectorAll('article .highlight').length")
    assert isinstance(blocks, int) and blocks >= 4
    assert f"kvcanary explain {code}" in browser.run("return document.querySelector('article').innerText")


def test_search_finds_an_error_code(browser: WebDriver, server: str) -> None:
    code = sorted(codes.by_code())[len(codes.by_code()) // 2]
    browser.get(f"{server}/?q={code}")
    first = browser.wait_for(
        "const a = document.querySelector('.md-search-result__item a'); return a && a.getAttribute('href');",
        timeout=30)
    assert isinstance(first, str) and f"errors/{code}/" in first, first


def test_a_missing_browser_fails_unless_skipped_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(SKIP_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium chromium-driver"):
        _browser()
    monkeypatch.setenv(SKIP_ENV, "1")
    with pytest.raises(pytest.skip.Exception):
        _browser()
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        _browser()
