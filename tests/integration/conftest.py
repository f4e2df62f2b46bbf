"""Fixtures of the integration tests that several modules share."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import CHROMIUM


@pytest.fixture
def browser() -> Iterator[Any]:
    """Debian's Chromium, headless, driven by Playwright (no browser download: its own
    binary by ``executable_path``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True,
                                              args=["--no-sandbox", "--disable-gpu",
                                                    "--disable-dev-shm-usage"])
        try:
            yield chromium
        finally:
            chromium.close()
