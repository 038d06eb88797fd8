"""The site builds with ``mkdocs build --strict``; an error page renders and search finds a code (Chromium).

The build runs on a copy of the docs in a temporary folder: the mkdocs hook regenerates the generated pages
in its docs folder, and the checkout's (git-ignored) copies must stay as ``kvcanary docs`` left them. When
Chromium or its driver is missing, the browser tests install Debian's packages as CI does (as root, or
through passwordless sudo); ``KVCANARY_SKIP_BROWSER=1`` skips them instead, outside CI only.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from kvcanary import codes
from tests.docs._webdriver import WebDriver

ROOT = Path(__file__).resolve().parents[2]
SKIP_ENV = "KVCANARY_SKIP_BROWSER"


def site_project(into: Path) -> Path:
    """A copy of the site's sources in ``into``: ``mkdocs.yml`` and ``docs/`` copied, the code linked."""
    shutil.copy2(ROOT / "mkdocs.yml", into / "mkdocs.yml")
    shutil.copytree(ROOT / "docs", into / "docs", symlinks=True)
    for name in ("kvcanary", "contracts", "backends", "benchmarks", "tools"):  # mkdocstrings, the results, the hook
        (into / name).symlink_to(ROOT / name, target_is_directory=True)
    return into


def _docs_state() -> dict[str, tuple[int, int]]:
    """Every file under the checkout's docs/: its size and modification time."""
    return {str(p.relative_to(ROOT)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in (ROOT / "docs").rglob("*") if p.is_file()}


DOCS_STATE: dict[str, dict[str, tuple[int, int]]] = {}


@pytest.fixture(scope="session")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    DOCS_STATE["before"] = _docs_state()
    project = site_project(tmp_path_factory.mktemp("site-src"))
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(out)], cwd=project,
                          check=False, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    DOCS_STATE["after"] = _docs_state()
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


def _find_browser() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


def install_browser() -> str | None:
    """Install Debian's ``chromium`` and ``chromium-driver`` with apt-get, as CI does; None when it ran,
    else why it could not (not root and no passwordless sudo, no apt-get, a failing command)."""
    if shutil.which("apt-get") is None:
        return "apt-get is not available"
    if os.geteuid() == 0:
        prefix: list[str] = []
    elif shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True, check=False).returncode == 0:
        prefix = ["sudo", "-n"]
    else:
        return "not root, and no passwordless sudo"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for cmd in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"]):
        res = subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=env, timeout=1200, check=False)
        if res.returncode != 0:
            return f"`{' '.join([*prefix, *cmd])}` failed: {res.stderr.strip()[-400:]}"
    return None


def _browser(install: Callable[[], str | None] = install_browser) -> tuple[str, str]:
    found = _find_browser()
    if found is None:
        why = install()
        found = _find_browser()
        if found is None:
            missing = "chromium" if not (shutil.which("chromium") or shutil.which("chromium-browser")) else "chromedriver"
            if os.environ.get(SKIP_ENV) == "1" and os.environ.get("CI", "").lower() not in ("1", "true"):
                pytest.skip(f"{missing} not installed and {SKIP_ENV}=1")
            pytest.fail(f"{missing} is not installed and could not be installed ({why or 'apt-get ran'}): run "
                        f"`apt-get install chromium chromium-driver` as root; outside CI, {SKIP_ENV}=1 skips this test")
    return found


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


def test_the_catalog_index_keeps_argument_names_whole(browser: WebDriver, server: str) -> None:
    """No argument name in the index's tables breaks across lines (each code element is one line box)."""
    browser.get(f"{server}/errors/")
    count = browser.wait_for("const n = document.querySelectorAll('article .kvc-codes td code').length; "
                             "return n > 0 ? n : null;")
    assert isinstance(count, int) and count > 500
    found = browser.run("const b = [...document.querySelectorAll('article .kvc-codes td code')]"
                        ".filter(c => c.getClientRects().length > 1).map(c => c.textContent); "
                        "return {count: b.length, names: b.slice(0, 10)};")
    assert found.get("count") == 0, found


def test_search_finds_an_error_code(browser: WebDriver, server: str) -> None:
    code = sorted(codes.by_code())[len(codes.by_code()) // 2]
    browser.get(f"{server}/?q={code}")
    first = browser.wait_for(
        "const a = document.querySelector('.md-search-result__item a'); return a && a.getAttribute('href');",
        timeout=30)
    assert isinstance(first, str) and f"errors/{code}/" in first, first


def test_a_missing_browser_is_installed_else_fails_unless_skipped_outside_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    tried: list[bool] = []

    def cannot_install() -> str:
        tried.append(True)
        return "not root, and no passwordless sudo"

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.delenv(SKIP_ENV, raising=False)
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.fail.Exception, match="apt-get install chromium chromium-driver"):
        _browser(cannot_install)
    assert tried == [True], "a missing browser is installed first"
    monkeypatch.setenv(SKIP_ENV, "1")
    with pytest.raises(pytest.skip.Exception):
        _browser(cannot_install)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception):
        _browser(cannot_install)
    installed: list[bool] = []

    def install() -> None:
        installed.append(True)

    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}" if installed else None)
    assert _browser(install) == ("/usr/bin/chromium", "/usr/bin/chromedriver")


def test_the_build_leaves_the_checkouts_docs_as_they_were(site: Path) -> None:
    """The site was built from a copy: every file under the checkout's docs/ is as it was before."""
    assert DOCS_STATE["before"] == DOCS_STATE["after"] == _docs_state()
