"""``kvcanary inspect --html``'s page in headless Chromium: it renders from the file alone (no request leaves
it), shows the bug class, the owner timeline, the record diff and the block table with the slot marked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kvcanary.demo.engine.faults import Fault
from kvcanary.evidence.report import html_report
from tests.docs._webdriver import WebDriver
from tests.docs.test_site import _browser
from tests.evidence.bundles import bundle


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDriver]:
    chromium, chromedriver = _browser()
    driver = WebDriver(chromedriver, chromium, tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield driver
    finally:
        driver.close()


def _open(browser: WebDriver, tmp_path: Path, fault: Fault) -> dict[str, object]:
    b = bundle(fault)
    page = tmp_path / f"{fault.value}.html"
    page.write_text(html_report(b), encoding="utf-8")
    browser.get(page.as_uri())
    assert browser.wait_for("return document.readyState === 'complete' && !!document.querySelector('#bug-class')")
    return b.meta


def test_the_page_shows_the_bug_class_timeline_diff_and_marked_slot(browser: WebDriver, tmp_path: Path) -> None:
    meta = _open(browser, tmp_path, Fault.DOUBLE_ALLOC)
    assert browser.run("return document.querySelector('#bug-class').textContent") == "double allocation"
    journal = meta["journal"]
    assert isinstance(journal, list)
    assert browser.run("return document.querySelectorAll('#timeline circle.event').length") == len(journal)
    width = browser.run("return document.querySelector('#timeline').getBoundingClientRect().width")
    assert isinstance(width, (int, float)) and width > 100
    assert browser.run("return document.querySelectorAll('#record-diff tr.differs').length") >= 1
    marked = browser.run("return [...document.querySelectorAll('#block-table .cell.marked')].map(c => c.textContent)")
    assert isinstance(marked, list) and marked and set(marked) == {str(meta["slot"])}
    color = browser.run("return getComputedStyle(document.querySelector('#block-table .cell.marked')).backgroundColor")
    assert color == "rgb(207, 34, 46)"  # the inline style sheet applied


def test_the_page_loads_nothing_from_outside(browser: WebDriver, tmp_path: Path) -> None:
    _open(browser, tmp_path, Fault.WRONG_CACHE_LOC)
    external = browser.run(
        "return [...document.querySelectorAll('[src],[href]')].map(e => e.getAttribute('src') || e.getAttribute('href'))")
    assert not external, external  # (the driver returns an empty list as {})
    entries = browser.run("return performance.getEntriesByType('resource').length")
    assert not entries, entries  # 0 (the driver returns 0 as {})
    assert "misdirected write: intended slot" in str(browser.run("return document.body.innerText"))
