"""The board's static site (``farm board site``) in a real browser (Debian's headless
Chromium, which tests/run installs): at 800 and 1400 px the index and a model page never
scroll sideways, the table and the plot are there, and every link leads to a file of the
site."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from farm.report.formats import Target, write
from tests.helpers import CHROMIUM
from tests.unit.test_board_report import EVIL, SMOL, hand_made_board

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="Debian's chromium is not installed (tests/run installs it with apt-get)")

PAGES = ["index.html", f"models/{SMOL[:16]}.html", f"models/{EVIL[:16]}.html"]


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The hand-made board's site, as `farm board site` writes it (the registry's site)."""
    directory = tmp_path_factory.mktemp("board-site")
    write(hand_made_board(), "site", Target(output=directory))
    return directory


@pytest.mark.parametrize("width", [800, 1400])
@pytest.mark.parametrize("name", PAGES)
def test_a_page_fits_the_window_with_its_table_and_plot(site: Path, browser: Any, width: int,
                                                        name: str) -> None:
    tab = browser.new_page(viewport={"width": width, "height": 1000})
    alerts: list[str] = []

    def dialog(opened: Any) -> None:
        alerts.append(opened.message)
        opened.dismiss()

    tab.on("dialog", dialog)
    tab.goto((site / name).as_uri())
    assert tab.evaluate("window.innerWidth") == width
    assert tab.evaluate("document.documentElement.scrollWidth <= "
                        "document.documentElement.clientWidth")
    table = tab.locator("table").first
    assert table.is_visible()
    # A wide table scrolls inside its box; the box itself stays within the window.
    assert table.evaluate("e => e.parentElement.getBoundingClientRect().right") <= width
    if name.startswith("models/"):
        svg = tab.locator("figure svg")
        assert svg.is_visible() and svg.locator("circle").count() >= 5
        assert svg.evaluate("e => e.getBoundingClientRect().right") <= width
        assert tab.locator("figcaption").is_visible()
    else:
        assert tab.locator("a[href^='models/']").count() >= 2
    assert not alerts, f"a bundle's markup ran: {alerts}"
    assert tab.evaluate("document.querySelectorAll('script').length") == 0
    tab.close()


def test_every_link_of_every_page_leads_to_a_file_of_the_site(site: Path,
                                                               browser: Any) -> None:
    tab = browser.new_page(viewport={"width": 1400, "height": 1000})
    root = site.resolve()
    checked = 0
    for page in sorted(site.rglob("*.html")):
        tab.goto(page.as_uri())
        for href in tab.evaluate("[...document.querySelectorAll('a[href]')]"
                                 ".map(a => a.href)"):
            parts = urlsplit(href)
            assert parts.scheme == "file", f"{page.name}: {href} leaves the site"
            target = Path(unquote(parts.path)).resolve()
            assert target.is_file() and root in target.parents, f"{page.name}: {href}"
            if parts.fragment:
                assert f'id="{parts.fragment}"' in target.read_text(encoding="utf-8"), href
            checked += 1
    assert checked > 50
    tab.close()
