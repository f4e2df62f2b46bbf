"""A terminal table colours a clearly faster job's speedup green and a clearly slower one
red (its 95% interval above or below 1x), at its fitted width or ``--wide``, and nothing
else: never with ``NO_COLOR``, in a pipe, in a file or in another format. What the colour
leaves when taken away is the plain table, byte for byte."""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from farm.store.db import make_engine
from tests.fixtures.nights import NIGHTS, store_night
from tests.helpers import run_cli
from tests.integration.test_golden_reports import load_fixture

REPO = Path(__file__).resolve().parents[2]
SGR = re.compile(r"\x1b\[[0-9;]*m")
GREEN, RED = "\x1b[32m", "\x1b[31m"


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The golden fixture's store (tests/fixtures/summaries: faster jobs, an A/A control,
    a variant that drafted nothing), a campaign whose variant decodes at 15 tok/s against
    the baseline's 20 (tests/fixtures/nights.py's runs), and a terminal's width."""
    url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    load_fixture(url)
    monkeypatch.setitem(NIGHTS, "slower", ("b1", 101, "1" * 40, 15.0, 2.0))
    engine = make_engine(url)
    try:
        store_night(engine, tmp_path, "slower", np.random.default_rng(1),
                    datetime(2026, 12, 5, tzinfo=UTC))
    finally:
        engine.dispose()
    return {"FARM_DATABASE_URL": url, "COLUMNS": "120"}


def _coloured(text: str) -> dict[str, set[str]]:
    """The coloured cells of ``text``, by colour."""
    found: dict[str, set[str]] = {GREEN: set(), RED: set()}
    for colour, cell in re.findall(r"(\x1b\[3[12]m)(.*?)\x1b\[0m", text):
        found[colour].add(cell)
    return found


def test_a_forced_terminal_colours_clear_speedups_and_only_them(
        store: dict[str, str]) -> None:
    plain = run_cli("report", "--all", env=store)
    coloured = run_cli("report", "--all", env={**store, "FORCE_COLOR": "1"})
    assert plain.exit_code == coloured.exit_code == 0
    assert not SGR.search(plain.stdout)
    assert SGR.sub("", coloured.stdout) == plain.stdout
    cells = _coloured(coloured.stdout)
    assert "1.51\u00d7 [1.50, 1.52]" in cells[GREEN]  # today's mtp on the rtx4090
    assert cells[RED] and all(cell.startswith("0.75\u00d7") for cell in cells[RED])
    for colour, low_above_one in ((GREEN, True), (RED, False)):
        for cell in cells[colour]:
            low, high = map(float, re.findall(r"\[(\S+), (\S+)\]", cell)[0])
            assert (low > 1) if low_above_one else (high < 1), cell
    # The A/A control's interval holds 1x, a variant that drafted nothing has no speedup:
    # both stay plain.
    for label, cell in (("control (A/A)", "1.00\u00d7"), ("no drafts", "no drafts")):
        line = next(line for line in coloured.stdout.splitlines() if label in line)
        assert cell in line and not SGR.search(line), line


@pytest.mark.parametrize("extra", [
    {"NO_COLOR": "1"}, {"NO_COLOR": "yes please"}], ids=["1", "any value"])
def test_no_color_wins_over_a_forced_terminal(store: dict[str, str],
                                              extra: dict[str, str]) -> None:
    plain = run_cli("report", "--all", env=store).stdout
    assert run_cli("report", "--all", env={**store, "FORCE_COLOR": "1", **extra}).stdout \
        == plain


@pytest.mark.parametrize("args", [("--format", "md"), ("--format", "csv"),
                                  ("--format", "json")], ids=" ".join)
def test_other_formats_are_never_coloured(
        store: dict[str, str], args: tuple[str, ...]) -> None:
    result = run_cli("report", "--all", *args, env={**store, "FORCE_COLOR": "1"})
    assert result.exit_code == 0 and not SGR.search(result.stdout)


def test_a_wide_table_on_a_terminal_is_coloured_too(store: dict[str, str]) -> None:
    plain = run_cli("report", "--all", "--wide", env=store)
    coloured = run_cli("report", "--all", "--wide", env={**store, "FORCE_COLOR": "1"})
    assert plain.exit_code == coloured.exit_code == 0
    assert GREEN in coloured.stdout and SGR.sub("", coloured.stdout) == plain.stdout


def test_a_file_is_never_coloured(store: dict[str, str], tmp_path: Path) -> None:
    written = tmp_path / "report.txt"
    result = run_cli("report", "--all", "-o", str(written),
                     env={**store, "FORCE_COLOR": "1"})
    assert result.exit_code == 0, result.output
    assert not SGR.search(written.read_text(encoding="utf-8"))


def _in_a_terminal(env: dict[str, str]) -> str:
    """`farm report --all`'s stdout when it is a pseudo-terminal (a fresh process)."""
    leader, follower = pty.openpty()
    script = "import sys\nfrom farm.cli import main\nsys.argv = ['farm', 'report', '--all']\n" \
             "main()\n"
    with subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=follower,
                          stderr=subprocess.DEVNULL, env={**os.environ, **env}) as process:
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closes with the process
                break
            if not chunk:
                break
            chunks.append(chunk)
        assert process.wait(timeout=60) == 0
    os.close(leader)
    return b"".join(chunks).decode().replace("\r\n", "\n")


def test_a_real_terminal_is_coloured_and_no_color_makes_it_plain(
        store: dict[str, str]) -> None:
    coloured = _in_a_terminal(store)
    assert GREEN in coloured and RED in coloured
    plain = _in_a_terminal({**store, "NO_COLOR": "1"})
    assert not SGR.search(plain) and SGR.sub("", coloured) == plain
