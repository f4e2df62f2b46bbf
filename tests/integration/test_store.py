"""Migrations run both ways on SQLite and PostgreSQL; the engine settings and pool bounds
hold."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import Engine, inspect, text

from farm.store.db import (
    current_revision,
    downgrade,
    make_engine,
    schema_head,
    table_names,
    upgrade,
)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'db' / 'farm.db'}"
    return str(request.getfixturevalue("postgres_url"))


def test_migrations_go_base_head_base(database_url: str) -> None:
    engine = make_engine(database_url)
    try:
        upgrade(engine)
        assert {"campaign", "job", "run", "alembic_version"} <= set(table_names(engine))
        downgrade(engine, "base")
        assert set(table_names(engine)) <= {"alembic_version"}
        upgrade(engine)
        assert "run" in table_names(engine)
    finally:
        engine.dispose()


def test_the_schema_head_read_from_file_names_is_alembics(database_url: str) -> None:
    from alembic.script import ScriptDirectory

    from farm.store.db import _alembic_config

    engine = make_engine(database_url)
    try:
        config = _alembic_config(engine)
        assert schema_head() == ScriptDirectory.from_config(config).get_current_head()
        with engine.connect() as connection:
            assert current_revision(connection) is None
        upgrade(engine)
        with engine.connect() as connection:
            assert current_revision(connection) == schema_head()
    finally:
        engine.dispose()


def test_migration_0009_adds_and_removes_the_runs_speculative_statistics(
        database_url: str) -> None:
    spec_columns = {"spec_draft_calls", "spec_accept_calls", "spec_gen_drafts",
                    "spec_acc_drafts", "spec_gen_tokens", "spec_acc_tokens", "spec_begin_ms",
                    "spec_draft_ms", "spec_accept_ms"}

    def run_columns() -> set[str]:
        return {column["name"] for column in inspect(engine).get_columns("run")}

    engine = make_engine(database_url)
    try:
        upgrade(engine, "0008")
        assert not spec_columns & run_columns()
        upgrade(engine, "0009")
        assert spec_columns <= run_columns()
        downgrade(engine, "0008")
        assert not spec_columns & run_columns()
        with engine.connect() as connection:  # the views the migration rebuilt still read
            assert connection.scalar(text("SELECT COUNT(*) FROM arm_summary")) == 0
    finally:
        engine.dispose()


def test_sqlite_uses_wal_and_a_busy_timeout(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    with engine.connect() as connection:
        assert connection.scalar(text("PRAGMA journal_mode")) == "wal"
        assert connection.scalar(text("PRAGMA busy_timeout")) == 30000
    engine.dispose()


def test_postgres_urls_are_driven_by_psycopg3(postgres_url: str) -> None:
    engine = make_engine(postgres_url)
    assert engine.dialect.driver == "psycopg"
    with engine.connect() as connection:
        assert connection.scalar(text("select 1")) == 1
    engine.dispose()


def _backends(engine: Engine, at_most: int) -> int:
    """Connections to ``engine``'s database but the one asking, once at most ``at_most``
    or after 5 s: a closed connection's backend leaves ``pg_stat_activity`` when its
    process has exited, a few milliseconds after the client closed it (longer on a busy
    machine)."""
    admin = make_engine(engine.url.render_as_string(hide_password=False), connections=0)
    deadline = time.monotonic() + 5.0
    try:
        while True:
            with admin.connect() as connection:
                found = int(connection.scalar(text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()")) or 0)
            if found <= at_most or time.monotonic() > deadline:
                return found
            time.sleep(0.05)
    finally:
        admin.dispose()


def test_a_bounded_engine_holds_at_most_its_connections(postgres_url: str) -> None:
    """A worker's engines (workers.fleet): its pool child's holds none between uses, its
    heartbeat's one, however many times each is used, from however many threads."""
    none, one = make_engine(postgres_url, connections=0), make_engine(postgres_url,
                                                                        connections=1)
    try:
        for _ in range(3):
            with none.connect() as connection:
                assert connection.scalar(text("select 1")) == 1
        assert _backends(none, 0) == 0
        with ThreadPoolExecutor(4) as threads:
            list(threads.map(lambda _: one.connect().close(), range(8)))
        assert _backends(one, 1) == 1
    finally:
        none.dispose()
        one.dispose()


def test_migrations_create_exactly_the_models_tables(database_url: str) -> None:
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from farm.store import board
    from farm.store.models import Base

    assert board.BoardRun.metadata is Base.metadata  # the board's tables too
    engine = make_engine(database_url)
    try:
        upgrade(engine)
        with engine.connect() as connection:
            context = MigrationContext.configure(connection, opts={"compare_type": True})
            assert compare_metadata(context, Base.metadata) == []
    finally:
        engine.dispose()
