"""What `farm report`, `history`, `compare`, `peers` and `status` print never carries a
control character a stranger put in the store: names of models, variants, builds, GPU
classes, workers and campaigns, a GPU's name, an error's text, an imported peer figure's
fields. Each holds terminal escapes (an OSC 8 link, clear screen, a window title, a C1
CSI); the output keeps the printable rest. One store (SQLite, tests/fixtures/nights.py and
a peer file), no server."""

from __future__ import annotations

import io
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pandas as pd
import pytest
from click.testing import CliRunner
from sqlalchemy import text

from farm.cli.base import FarmGroup
from farm.errors import BenchmarkError
from farm.report.cells import clean
from farm.report.formats import Target, write
from farm.report.kinds import Tables
from farm.store.db import make_engine, upgrade
from tests.fixtures.nights import store_nights
from tests.helpers import run_cli

PEERS = Path(__file__).resolve().parents[1] / "fixtures" / "peers"
# A link that shows one thing and opens another, clear screen, a window title, and a
# one-byte CSI (C1) that sets a colour: each between two printable words.
ESCAPES = ("\x1b]8;;https://evil.example/\x1b\\link\x1b]8;;\x1b\\", "\x1b[2J", "\x1b]0;x\x07",
           "\x9b31m")
HOSTILE = "a" + "b".join(ESCAPES) + "c"
SHOWN = clean(HOSTILE)  # its printable rest
# What a terminal acts on (newlines and tabs aside: the outputs' own layout).
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, str], str]]:
    """The nights' store with a stranger's text in every name a report, a history, a
    comparison or a status shows, and in a peer figure beside the third night; its
    environment and the comparable key."""
    folder = tmp_path_factory.mktemp("terminal")
    url = f"sqlite:///{folder / 'store.sqlite'}"
    engine = make_engine(url)
    try:
        upgrade(engine)
        key, _ = store_nights(engine, folder)
        env = {"FARM_DATABASE_URL": url, "COLUMNS": "400"}
        imported = run_cli("import", str(PEERS / "speed-bench-written-from-source.json"),
                           "--build-commit", "3" * 40, "--model-file", "m.gguf", env=env)
        assert imported.exit_code == 0, imported.output
        with engine.begin() as connection:
            for statement in (
                    "UPDATE job SET model_name = :x, variant_name = :x, build_name = :x, "
                    "gpu_class = :x, lease_owner = :x, error = :x",
                    "UPDATE job SET state = 'failed', failure_class = :x WHERE id = 1",
                    "UPDATE campaign SET name = :x || name WHERE name = 'night-2'",
                    "UPDATE run SET build_name = :x, gpu_name = :x, worker_name = :x, "
                    "host = :x",
                    "UPDATE peer_import SET file_name = :x, note = :x",
                    "UPDATE peer_result SET model_type = :x, backends = :x, cpu_info = :x, "
                    "gpu_info = :x, spec_type = :x, test = :x, source = :x"):
                connection.execute(text(statement), {"x": HOSTILE})
    finally:
        engine.dispose()
    yield env, key


# Each command in each format a terminal shows (`farm status` has one).
OUTPUTS = [(command, fmt) for command in ("report", "history", "compare", "peers")
           for fmt in ("table", "md", "json")] + [("status", "table")]


@pytest.mark.parametrize(("command", "fmt"), OUTPUTS)
def test_no_control_character_of_the_store_reaches_the_terminal(
        store: tuple[dict[str, str], str], command: str, fmt: str) -> None:
    env, key = store
    args = {"report": ["report", "--all"], "history": ["history", key[:10]],
            "compare": ["compare", "night-1", "night-3"],
            "peers": ["peers", "--all"], "status": ["status", HOSTILE + "night-2"]}[command]
    result = run_cli(*args, *(["--format", fmt] if command != "status" else []), env=env)
    assert result.exit_code in (0, 1), result.output
    found = CONTROL.findall(result.stdout + result.stderr)
    assert not found, (sorted(set(found)), result.output)
    if fmt != "json":
        assert SHOWN in result.stdout, result.stdout


def test_a_failed_jobs_error_prints_its_lines_without_their_escapes() -> None:
    """A job's error may quote a hostile server's or build's own lines: the one ``error:``
    a command ends with keeps their text and line breaks, not their escapes."""
    @click.group(cls=FarmGroup)
    def group() -> None:
        """A group like ``farm``'s."""

    @group.command()
    def fail() -> None:
        raise BenchmarkError(f"llama-server crashed:\n{HOSTILE}\nlast line")

    result = CliRunner().invoke(group, ["fail"])
    assert result.exit_code == 1
    assert result.output == f"error: llama-server crashed:\n{SHOWN}\nlast line\n"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "pipe"])
def test_a_csv_on_a_terminal_loses_a_strangers_escapes(
        monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    """CSV printed to a terminal (``farm report --format csv``) is cleaned as a table is;
    in a pipe it stays the data as stored."""
    stdout = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stdout", stdout)
    frame = pd.DataFrame({"gpu": [HOSTILE], "speedup": [1.2]})
    write(Tables(frame, []), "csv", Target())
    assert stdout.getvalue() == f"gpu,speedup\n{SHOWN if terminal else HOSTILE},1.2\n"
