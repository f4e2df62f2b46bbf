"""Golden reports: what `farm report` and `farm export` make of a store holding every job
summary shape ever stored (tests/fixtures/summaries/README.md) stays as it was, on SQLite
and PostgreSQL, but for the columns a change adds to report rows on purpose
(``ADDED_COLUMNS``) and the interval ends grouped reports compute anew since issue 24
(``RECOMPUTED_INTERVALS``).

The goldens were made by ``tests/fixtures/summaries/make_fixture.py``, which loads the
fixture and runs the commands through this module's ``load_fixture`` and ``outputs``.
"""

from __future__ import annotations

import ast
import csv
import io
import json
import shutil
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from farm.report.text import REPORT_OPENING
from farm.run_metrics import RUN_METRICS
from farm.store.db import current_revision, make_engine, upgrade
from tests.helpers import run_cli

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "summaries"
STORE = FIXTURE / "store.sqlite"
GOLDEN = FIXTURE / "golden"

# The store's schema when the goldens were made (6d1ce4e): a run metric whose column came
# later is empty in the goldens' runs, and so are its summaries per arm.
GOLDEN_SCHEMA = "0012"
# Keys a change adds to the rows of `farm report --format json/csv` on purpose; every
# other value must stay as the golden has it. Empty at the commit that made the goldens
# (6d1ce4e); since the typed job summary (issue 21), the fields it stored and never showed.
ADDED_COLUMNS: tuple[str, ...] = (
    "interval_method", "order_effect", "order_low", "order_high", "agreement_control",
    "agreement_applicable", "drift_per_block", "drift_low", "drift_high", "acceptance_low",
    "acceptance_high", "overlap_mean", "tpot_p99_ms_baseline", "e2e_p99_ms_baseline",
    "median_speedup", "model_size",
    # The node's other work (issue 25): the summary's busy blocks.
    "measured_blocks", "busy_blocks", "busy_blocks_baseline", "busy_blocks_variant",
    "busy_cores", "busy_wait_s",
    # Grouped and per-category rows tested against no speedup, the false discovery rate
    # held across a report's rows (issue 24).
    "p_value", "q_value", "verdict",
    # The warm-up check (issue 24): summary version 7.
    "warmup_effect", "warmup_low", "warmup_high", "warmup_blocks", "warmup_flag",
    # What the drift test was made against (issue 38): summary version 8.
    "drift_earlier_jobs",
    # The server's timings against the client's clock (issue 55): summary version 9.
    "speed_clock", "clock_ratio_baseline", "clock_ratio_variant", "clock_disagreement",
    "clock_flag",
    # Where each job was measured (issue 29): provenance in every format.
    "server_version", "hosts", "device", "measured_at",
    # The report's answer on every row (issue 29): its campaign x model x GPU class's.
    "headline",
    # Each run metric's summary per arm whose column came after the goldens' schema
    # (farm.run_metrics).
    *(fact.name for metric in RUN_METRICS if metric.since > GOLDEN_SCHEMA
      for fact in metric.per_arm))
# The runs' columns added since, in exports: the commit a source build was made from
# (issue 22), where a Hub or URL model came from (issue 23), the node's busiest other
# processes (issue 25), whether its server ran in the sandbox (issue 35), the class of the
# machine that measured it and its GPU's memory (issue 37); and every run metric whose
# column came after the goldens' schema (farm.run_metrics: the node's other work, issue 25;
# its block's server start and warm-up, issue 56).
ADDED_RUN_COLUMNS: tuple[str, ...] = (
    "build_commit", "model_source", "node_top", "sandboxed", "machine_class", "gpu_memory_mb",
    *(metric.name for metric in RUN_METRICS if metric.since > GOLDEN_SCHEMA))

# Columns of the grouped reports that a statistics change made since the goldens computes
# anew on purpose, by golden name prefix (issue 24: HKSJ's scale truncated at 1 in every
# group interval; per-category rows made with the job's design, a two-stage job's from its
# second stage). Their values are the statistics' tests' business (tests/unit/test_stats*);
# here each must be empty where the golden's is, and the ends an interval around the
# row's speedup (tau: the spread of the recomputed rows).
RECOMPUTED_INTERVALS: dict[str, tuple[str, ...]] = {
    "group-": ("low", "high"), "by-category": ("speedup", "low", "high", "tau")}

# libpq's session time zone: PostgreSQL's timestamps (export's started_at) print with it.
CLI_ENV = {"PGTZ": "UTC"}


@dataclass(frozen=True)
class Command:
    """One golden: the file under golden/ and the `farm` command that makes it (export's
    ``-o FILE`` is added; the golden is that file, the others what the command prints)."""

    golden: str
    args: tuple[str, ...]

    @property
    def exports(self) -> bool:
        """Whether the command writes a file (``farm export``) rather than printing."""
        return self.args[0] == "export"


# The latest campaign (no name) is "today"; "history" holds the older summary shapes.
COMMANDS = (
    Command("report.json", ("report", "--format", "json")),
    Command("report-history.json", ("report", "history", "--format", "json")),
    Command("report-all.json", ("report", "--all", "--format", "json")),
    Command("report.csv", ("report", "--format", "csv")),
    Command("report-history.csv", ("report", "history", "--format", "csv")),
    Command("report-all.csv", ("report", "--all", "--format", "csv")),
    Command("group-variant.csv", ("report", "--group-by", "variant", "--format", "csv")),
    Command("group-variant-history.csv",
            ("report", "history", "--group-by", "variant", "--format", "csv")),
    Command("group-variant-all.csv",
            ("report", "--all", "--group-by", "variant", "--format", "csv")),
    Command("by-category.csv", ("report", "--by-category", "--format", "csv")),
    Command("by-category-history.csv",
            ("report", "history", "--by-category", "--format", "csv")),
    Command("by-category-all.csv", ("report", "--all", "--by-category", "--format", "csv")),
    Command("export.csv", ("export", "--format", "csv")),
    Command("export-history.csv", ("export", "history", "--format", "csv")),
)


def dialect_of(url: str) -> str:
    """"sqlite" or "postgresql"."""
    return make_url(url).get_backend_name()


def golden_path(command: Command, dialect: str) -> Path:
    """The golden of ``command`` on ``dialect``: its own ``-postgresql`` file where
    PostgreSQL's output differs from SQLite's (the README says why), else the common one."""
    common = GOLDEN / command.golden
    if dialect == "postgresql":
        own = common.with_name(f"{common.stem}-postgresql{common.suffix}")
        if own.exists():
            return own
    return common


def load_fixture(url: str, store: Path = STORE) -> None:
    """The fixture's store at ``url`` (a SQLite file, or an empty PostgreSQL database),
    then upgraded to this farm's schema as `farm db upgrade` would.

    SQLite gets a copy of the file. PostgreSQL is brought to the fixture's revision,
    gets its rows table by table (ids kept, JSON null kept apart from SQL NULL, the
    fixture's UTC times as UTC) and its id sequences moved past them.
    """
    if dialect_of(url) == "sqlite":
        database = make_url(url).database
        assert database, url
        shutil.copyfile(store, database)
    else:
        _copy_rows(store, url)
    engine = make_engine(url)
    try:
        upgrade(engine)
    finally:
        engine.dispose()


def _copy_rows(store: Path, target_url: str) -> None:
    # Read as an immutable file: farm's engine would turn the committed fixture to WAL.
    source = sa.create_engine(f"sqlite:///file:{store}?immutable=1&uri=true")
    target = make_engine(target_url)
    try:
        with source.connect() as connection:
            revision = current_revision(connection)
        assert revision is not None, f"{store} has no schema revision"
        upgrade(target, revision)
        tables = sa.MetaData()
        tables.reflect(source)
        with source.connect() as reading, target.begin() as writing:
            for table in tables.sorted_tables:
                if table.name != "alembic_version":
                    _copy_table(table, reading, writing)
    finally:
        source.dispose()
        target.dispose()


def _copy_table(table: sa.Table, reading: sa.Connection, writing: sa.Connection) -> None:
    json_columns = {column.name for column in table.columns if isinstance(column.type, sa.JSON)}
    # JSON as the text stored, so that JSON's null and SQL's NULL stay apart.
    selected = [sa.type_coerce(column, sa.Text).label(column.name)
                if column.name in json_columns else column for column in table.columns]
    rows = [{name: _value(value, name in json_columns) for name, value in row.items()}
            for row in reading.execute(sa.select(*selected)).mappings()]
    target = sa.Table(table.name, sa.MetaData(), *(
        sa.Column(column.name, sa.JSON(none_as_null=True) if column.name in json_columns
                  else column.type.as_generic()) for column in table.columns))
    if rows:
        writing.execute(target.insert(), rows)
    if "id" in table.columns and isinstance(table.columns["id"].type, sa.Integer):
        writing.execute(sa.text(f"SELECT setval(pg_get_serial_sequence('{table.name}', 'id'), "
                                f"COALESCE((SELECT MAX(id) FROM {table.name}), 1))"))


def _value(value: Any, is_json: bool) -> Any:
    if is_json:
        if value is None:
            return None
        return sa.JSON.NULL if value == "null" else json.loads(value)
    # SQLite keeps the times the farm wrote (UTC) without their zone.
    if isinstance(value, datetime) and value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value


def outputs(url: str, workdir: Path) -> dict[str, bytes]:
    """Each command's output against the store at ``url``, by golden name."""
    found = {}
    for command in COMMANDS:
        args = command.args
        written = workdir / command.golden
        if command.exports:
            args = (*args, "-o", str(written))
        result = run_cli(*args, env={"FARM_DATABASE_URL": url, **CLI_ENV})
        assert result.exit_code == 0, (command, result.output, result.exception)
        found[command.golden] = written.read_bytes() if command.exports else result.stdout_bytes
    return found


# The report's JSON names its schema and version since issue 40: the rows the goldens hold
# as a bare list are the value of its "jobs", on the lines between the two.
ENVELOPE = {REPORT_OPENING: "[", "]}": "]"}


def json_difference(golden: str, actual: str) -> str | None:
    """Where ``actual`` (`farm report --format json`: one object a line) differs from
    ``golden`` once each object is rid of ``ADDED_COLUMNS`` and its envelope
    (``ENVELOPE``) read as the golden's list; None where it does not."""
    expected, got = golden.split("\n"), actual.split("\n")
    if len(got) > 1:
        got[0], got[-2] = ENVELOPE.get(got[0], got[0]), ENVELOPE.get(got[-2], got[-2])
    if len(expected) != len(got):
        return f"{len(got)} lines, the golden has {len(expected)}"
    for number, (want, line) in enumerate(zip(expected, got, strict=True), start=1):
        if line.startswith("{"):
            body, comma = (line[:-1], ",") if line.endswith(",") else (line, "")
            row = {key: value for key, value in json.loads(body).items()
                   if key not in ADDED_COLUMNS}
            line = json.dumps(row, separators=(",", ":"), allow_nan=False) + comma
        if line != want:
            return f"line {number}:\n  golden {want[:300]}\n  actual {line[:300]}"
    return None


def _interval_difference(name: str, want: str, got: str, row: dict[str, str]) -> str | None:
    """How a recomputed column differs from what the golden allows (None: it does not):
    empty where the golden's is, an interval end on its side of the row's speedup."""
    if (want == "") != (got == ""):
        return f"column {name}: golden {want!r}, actual {got!r}"
    if got == "" or row.get("speedup", "") == "" or name not in ("low", "high"):
        return None
    below = float(got) <= float(row["speedup"])
    return None if below == (name == "low") else (
        f"column {name}: {got} on the wrong side of the speedup {row['speedup']}")


def _rewritten(golden: str, actual: str) -> bool:
    """Whether a CSV cell holds the golden's value as written since issue 29: a nested value
    (the golden's Python repr in reports) as JSON, a missing one empty (the golden's
    "null" in exports), a time with its UTC offset, an integer column's number without
    the ".0" a missing value in its column made."""
    if golden == "null":
        return actual == ""
    if actual in (f"{golden}+00:00", golden.removesuffix(".0")):
        return True
    try:
        return bool(actual) and ast.literal_eval(golden) == json.loads(actual)
    except (ValueError, SyntaxError):
        return False


def csv_difference(golden: str, actual: str, added: tuple[str, ...] = ADDED_COLUMNS,
                   recomputed: tuple[str, ...] = ()) -> str | None:
    """Where ``actual`` differs from ``golden`` cell by cell on the golden's columns, the
    columns in its order with any of ``added`` beside them; None where it does not.
    The ``recomputed`` columns (``RECOMPUTED_INTERVALS``) are checked as
    ``_interval_difference`` does, not cell by cell."""
    expected = list(csv.reader(io.StringIO(golden, newline="")))
    got = list(csv.reader(io.StringIO(actual, newline="")))
    if len(expected) != len(got):
        return f"{len(got)} records, the golden has {len(expected)}"
    if not got:
        return None
    header = [name for name in got[0] if name not in added]
    if header != expected[0]:
        return f"columns {got[0]}, the golden has {expected[0]}"
    index = [got[0].index(name) for name in expected[0]]
    for number, (want, record) in enumerate(zip(expected[1:], got[1:], strict=True), start=2):
        cells = [record[i] for i in index]
        row = dict(zip(expected[0], cells, strict=True))
        for name, a, b in zip(expected[0], want, cells, strict=True):
            if name in recomputed:
                why = _interval_difference(name, a, b, row)
                if why is not None:
                    return f"record {number}, {why}"
            elif a != b and not _rewritten(a, b):
                return f"record {number}, column {name}: golden {a!r}, actual {b!r}"
    return None


def difference(command: Command, golden: bytes, actual: bytes) -> str | None:
    """How ``actual`` differs from the golden of ``command`` (None: it does not): a binary
    export byte for byte, JSON as ``json_difference``, CSV (reports and exports: the runs'
    columns grow too) as ``csv_difference``."""
    if command.exports:
        if command.golden.endswith(".csv"):
            return csv_difference(golden.decode(), actual.decode(), ADDED_RUN_COLUMNS)
        return None if actual == golden else "not byte-identical"
    if command.golden.endswith(".json"):
        return json_difference(golden.decode(), actual.decode())
    recomputed = next((columns for prefix, columns in RECOMPUTED_INTERVALS.items()
                       if command.golden.startswith(prefix)), ())
    return csv_difference(golden.decode(), actual.decode(), recomputed=recomputed)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store holding the fixture: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.sqlite'}"
    else:
        url = request.getfixturevalue("postgres_url")
    load_fixture(url)
    yield url


def test_reports_and_export_match_the_goldens(store_url: str, tmp_path: Path) -> None:
    found = outputs(store_url, tmp_path)
    dialect = dialect_of(store_url)
    differences = {}
    for command in COMMANDS:
        golden = golden_path(command, dialect)
        differs = difference(command, golden.read_bytes(), found[command.golden])
        if differs is not None:
            differences[golden.name] = differs
    assert not differences, "\n".join(f"{name}: {why}" for name, why in differences.items())


def test_the_fixture_holds_every_summary_shape() -> None:
    with closing(sqlite3.connect(f"file:{STORE}?immutable=1", uri=True)) as connection:
        texts = [text for (text,) in connection.execute("SELECT summary FROM job")]
    shapes = {frozenset(summary) for summary in map(json.loads, filter(None, texts)) if summary}
    # The landmarks: before log_se, before runs, before kind, today's (with streams).
    assert any("log_se" not in keys for keys in shapes)
    assert any("log_se" in keys and "runs" not in keys for keys in shapes)
    assert any("runs" in keys and "kind" not in keys for keys in shapes)
    assert any({"kind", "concurrency", "slot_acceptance", "low_slots"} <= keys for keys in shapes)
    # Shapes A to K of the README, and K with a run's streams; one JSON null, SQL NULLs.
    assert len(shapes) == 12
    assert texts.count("null") == 1 and None in texts


def test_the_comparisons_catch_a_change_and_allow_only_the_added_columns() -> None:
    golden = '[\n{"a":1,"b":0.1},\n{"a":2,"b":null}\n]'
    assert json_difference(golden, golden) is None
    assert json_difference(golden, golden.replace("0.1", "0.10000000000000002")) is not None
    assert json_difference(golden, '[\n{"a":1,"b":0.1,"c":3},\n{"a":2,"b":null}\n]')
    table = "a,b\n1,x\n2,\"y\nz\"\n"
    assert csv_difference(table, table) is None
    assert csv_difference(table, table.replace("x", "w")) is not None
    assert csv_difference(table, "a,c,b\n1,3,x\n2,4,\"y\nz\"\n") is not None
