"""A real headless Chromium (Debian's package, installed by scripts/provision.sh) driven by Playwright
at the system browser — never a downloaded browser build; one Chromium for the browser tests, a fresh
context (cookies, storage, cache) per test. Screenshots are test artifacts:
under the pytest basetemp (``artifacts/``) and in ``test-artifacts/`` (ignored by git)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="package")
def chromium() -> Iterator[Any]:
    """One headless Chromium for the browser tests (its start-up is most of a page's cost); closed
    after them, so Playwright's event loop does not outlive the package."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "Chromium is missing: run scripts/provision.sh (as root it installs it)"
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def browser_page(chromium: Any) -> Iterator[Any]:
    """A page (1280 × 1000) in a fresh browser context: no cookies, storage or cache of another
    test (the isolation of a fresh profile, without starting another Chromium)."""
    ctx = chromium.new_context(viewport={"width": 1280, "height": 1000})
    try:
        yield ctx.new_page()
    finally:
        ctx.close()


@pytest.fixture
def shot(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``shot(page, name)`` saves a full-page screenshot as a test artifact and returns its path."""
    dirs = [tmp_path_factory.getbasetemp() / "artifacts", REPO / "test-artifacts"]
    for d in dirs:
        d.mkdir(parents=True, exist_ok=True)

    def take(page: Any, name: str) -> Path:
        path = dirs[0] / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        shutil.copy(path, dirs[1] / path.name)
        return path

    return take
