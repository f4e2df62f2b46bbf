"""The HTML report in a real browser (Debian's headless Chromium, which tests/run installs):
at 800 and 1400 px the jobs table fits the window without sideways scrolling (the least
needed columns hidden, and named), the page never scrolls sideways, and it opens with the
headline and the forest plot."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import run_cli
from tests.integration.test_golden_reports import load_fixture

CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="Debian's chromium and chromium-driver are not installed (tests/run installs them "
           "with apt-get)")


@pytest.fixture(scope="module")
def page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The report of every campaign of the golden fixture's store, as `farm report` writes it."""
    directory = tmp_path_factory.mktemp("html")
    url = f"sqlite:///{directory / 'store.sqlite'}"
    load_fixture(url)
    output = directory / "report.html"
    result = run_cli("report", "--all", "--format", "html", "-o", str(output),
                     env={"FARM_DATABASE_URL": url})
    assert result.exit_code == 0, result.output
    return output


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage"):
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.mark.parametrize("width", [800, 1400])
def test_the_page_fits_the_window_and_opens_with_its_answer(page: Path, browser: Any,
                                                              width: int) -> None:
    from selenium.webdriver.common.by import By

    browser.set_window_size(width, 1000)
    browser.get(page.as_uri())
    inner = browser.execute_script("return window.innerWidth")
    assert abs(inner - width) <= 20, inner  # the window is the size asked for
    table = browser.find_element(By.CSS_SELECTOR, "section table")
    for box in (table, table.find_element(By.XPATH, "..")):  # the table and its scroll box
        assert browser.execute_script(
            "return arguments[0].scrollWidth <= arguments[0].clientWidth", box)
    assert browser.execute_script("return arguments[0].getBoundingClientRect().right",
                                  table) <= inner
    assert browser.execute_script(
        "return document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    headline = browser.find_element(By.ID, "headline")
    assert headline.is_displayed() and "best of" in headline.text
    assert browser.execute_script("return arguments[0].getBoundingClientRect().top",
                                  headline) < 1000
    assert browser.find_element(By.CSS_SELECTOR, 'img[alt="speedup_intervals"]').is_displayed()
    headers = [cell.text for cell in table.find_elements(By.TAG_NAME, "th") if cell.is_displayed()]
    assert {"campaign", "variant", "speedup", "acceptance"} <= set(headers)
    # Rank 2 columns go below 1800 px, rank 1 ones below 1100 px, and a note says so.
    assert "memory MiB (+variant, draft context)" not in headers
    assert ("baseline tok/s" in headers) == (width == 1400)
    assert browser.find_element(By.CLASS_NAME, "narrow-note").is_displayed()
