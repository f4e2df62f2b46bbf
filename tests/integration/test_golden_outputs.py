"""Golden outputs of every result command in every format it has: `farm report`, `compare`,
`history`, `peers` and `export` (tables at 80 and 200 columns, markdown, CSV, JSON, HTML)
from one fixture store, and `farm bisect`'s answer and plan from fixture answers. Made
before the formats moved to one registry (issue 36), so that the move shows itself
byte-identical.

The store is made afresh for the module (SQLite): the summaries fixture (every job summary
shape, tests/fixtures/summaries), the three nights of tests/fixtures/nights.py on their
three builds, and the peers' fixture files imported beside the third night's build. With
``SPECFARM_WRITE_GOLDENS=1`` the test writes the goldens it finds different or missing and
fails, naming them (review them with ``git diff``). The exports hold every run column: a run
metric declared after them (``EXPORT_SCHEMA``) adds its column there, and the rest stays
byte-identical.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from farm.report.bisect import bisect_markdown, bisect_text, plan_text
from farm.run_metrics import RUN_METRICS
from farm.store.db import make_engine
from tests.fixtures.nights import store_nights
from tests.helpers import run_cli
from tests.integration.test_golden_reports import csv_difference, load_fixture

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
GOLDEN = FIXTURES / "outputs"
PEERS = FIXTURES / "peers"
WRITE = os.environ.get("SPECFARM_WRITE_GOLDENS") == "1"
# The one thing a page holds of when it was made.
GENERATED = re.compile(rb"Generated \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC")
# The migration of the newest run column the export goldens hold, and the run metrics
# declared since: columns an export adds to its golden's.
EXPORT_SCHEMA = "0027"
NEWER = tuple(metric.name for metric in RUN_METRICS if metric.since > EXPORT_SCHEMA)


@dataclass(frozen=True)
class Output:
    """One golden: its file under tests/fixtures/outputs and the `farm` command that makes
    it at ``columns`` (a ``FILE`` argument: the command writes the golden there)."""

    golden: str
    args: tuple[str, ...]
    columns: int = 200


def _formats(name: str, args: tuple[str, ...], formats: tuple[str, ...]) -> list[Output]:
    """``args`` in each of ``formats``: a table at 80 and at 200 columns, the others as
    they are; HTML written to a file."""
    found = []
    for fmt in formats:
        if fmt == "table":
            found += [Output(f"{name}.table80.txt", args, 80), Output(f"{name}.table200.txt", args)]
        elif fmt == "html":
            found.append(Output(f"{name}.html", (*args, "--format", "html", "-o", "FILE")))
        else:
            found.append(Output(f"{name}.{fmt}", (*args, "--format", fmt)))
    return found


OUTPUTS = (
    *_formats("report", ("report", "today"), ("table", "md", "csv", "json", "html")),
    *_formats("report-group", ("report", "today", "--group-by", "variant"),
              ("table", "md")),
    *_formats("report-category", ("report", "today", "--by-category"), ("table", "md")),
    *_formats("compare", ("compare", "night-2", "night-3"), ("table", "md", "csv", "json")),
    *_formats("history", ("history", "KEY"), ("table", "md", "json", "html")),
    *_formats("peers", ("peers", "night-3"), ("table", "md", "csv", "json")),
    *_formats("export", ("export", "night-3"), ("csv", "json")),
)


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, bytes]]:
    """Every output of ``OUTPUTS`` by golden name, from one store made for the module."""
    folder = tmp_path_factory.mktemp("outputs")
    url = f"sqlite:///{folder / 'store.sqlite'}"
    load_fixture(url)
    engine = make_engine(url)
    try:
        key, _ = store_nights(engine, folder)
    finally:
        engine.dispose()
    env = {"FARM_DATABASE_URL": url}
    # speed-bench's file records neither build nor model: given, the third night's; the
    # others record theirs and stay unmatched.
    for name, given in (("speed-bench-written-from-source.json",
                         ("--build-commit", "3" * 40, "--model-file", "m.gguf")),
                        ("spec-bench-details-written-from-source.jsonl", ()),
                        ("spec-bench-compact-baseline-written-from-source.jsonl", ())):
        imported = run_cli("import", str(PEERS / name), *given, env=env)
        assert imported.exit_code == 0, imported.output
    found = {}
    for output in OUTPUTS:
        written = folder / output.golden
        args = [str(written) if arg == "FILE" else key[:10] if arg == "KEY" else arg
                for arg in output.args]
        result = run_cli(*args, env={**env, "COLUMNS": str(output.columns), "PGTZ": "UTC"})
        assert result.exit_code == 0, (output, result.output, result.exception)
        data = written.read_bytes() if "FILE" in output.args else result.stdout_bytes
        found[output.golden] = GENERATED.sub(b"Generated (time) UTC", data)
    yield found


def _bisect_outputs() -> dict[str, bytes]:
    """`farm bisect`'s answer as text, markdown and JSON, and its ``--dry-run`` plan, made
    from the fixture answers as the command makes them."""
    answer = json.loads((GOLDEN / "bisect-answer.fixture.json").read_text(encoding="utf-8"))
    plan = json.loads((GOLDEN / "bisect-plan.fixture.json").read_text(encoding="utf-8"))
    return {name: (text + "\n").encode() for name, text in (
        ("bisect.txt", bisect_text(answer)), ("bisect.md", bisect_markdown(answer)),
        ("bisect.json", json.dumps(answer, indent=2)), ("bisect-plan.txt", plan_text(plan)),
        ("bisect-plan.json", json.dumps(plan, indent=2)))}


def _same(name: str, golden: bytes, data: bytes) -> bool:
    """Whether ``data`` is the golden: byte-identical, or an export whose only difference is
    the columns of the run metrics declared since its golden (``NEWER``)."""
    if golden == data:
        return True
    if not NEWER or not name.startswith("export."):
        return False
    if name.endswith(".csv"):
        return csv_difference(golden.decode(), data.decode(), NEWER) is None
    records: list[dict[str, object]] = json.loads(data)
    return bool(json.loads(golden) == [{key: value for key, value in record.items()
                                        if key not in NEWER} for record in records])


def _check(found: dict[str, bytes]) -> None:
    differ = []
    for name, data in found.items():
        golden = GOLDEN / name
        if golden.exists() and _same(name, golden.read_bytes(), data):
            continue
        differ.append(name)
        if WRITE:
            golden.write_bytes(data)
    assert not differ, ("written (review with git diff): " if WRITE else
                        "differ from their goldens in tests/fixtures/outputs: ") + ", ".join(differ)


def test_every_result_command_in_every_format_matches_its_golden(
        made: dict[str, bytes]) -> None:
    _check(made)


def test_bisect_answer_and_plan_match_their_goldens() -> None:
    _check(_bisect_outputs())
