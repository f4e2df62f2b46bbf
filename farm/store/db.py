"""Engines and schema migration for SQLite (embedded) and PostgreSQL (fleet)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, inspect
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError

from farm.errors import ConfigError, RuntimeFarmError
from farm.settings import redact_url


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL lets `farm report` read while `farm run` writes; the busy timeout makes a writer
    # wait for a lock instead of failing at once.
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def normalise_url(url: str) -> str:
    """Accept ``postgresql://`` and ``postgres://`` and drive them with psycopg 3."""
    try:
        parsed = make_url(url)
    except ArgumentError as exc:
        raise ConfigError(f"FARM_DATABASE_URL: cannot parse {url!r}: {exc}") from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str) -> Engine:
    """An engine for ``url``; SQLite files get their directory, WAL and a busy timeout."""
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(url, pool_pre_ping=True)


def _alembic_config(engine: Engine) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    config.attributes["engine"] = engine
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate the database to ``revision``; one clear error if it cannot be reached."""
    from alembic import command

    try:
        with engine.connect():
            pass
    except OperationalError as exc:
        raise RuntimeFarmError(f"cannot connect to the database {redact_url(str(engine.url))}: "
                               f"{exc.orig}") from exc
    command.upgrade(_alembic_config(engine), revision)


def downgrade(engine: Engine, revision: str = "base") -> None:
    from alembic import command

    command.downgrade(_alembic_config(engine), revision)


def table_names(engine: Engine) -> list[str]:
    return sorted(inspect(engine).get_table_names())
