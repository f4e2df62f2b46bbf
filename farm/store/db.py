"""Engines and schema migration for SQLite (embedded) and PostgreSQL (fleet)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, OperationalError
from sqlalchemy.pool import NullPool

from farm.errors import ConfigError, RuntimeFarmError, ServiceUnavailable
from farm.settings import Settings, redact_url
from farm.unreachable import database_unreachable


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
    except (ArgumentError, ValueError) as exc:  # ValueError: a port that is no number
        raise ConfigError(f"FARM_DATABASE_URL: cannot parse {redact_url(url)!r}; give a URL "
                          "such as postgresql://user:password@host:5432/db (escape special "
                          "characters in the password with %XX)") from exc
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed.render_as_string(hide_password=False)


def make_engine(url: str, connections: int | None = None) -> Engine:
    """An engine for ``url``; SQLite files get their directory, WAL and a busy timeout.

    ``connections`` bounds a PostgreSQL engine's pool: that many held at most (a caller
    that needs one while all are out waits for it), 0 none held (each use connects); None,
    SQLAlchemy's default (5 held, 10 more while busy). A fleet's workers hold none between
    uses (``workers.fleet``), not a default pool in each of their processes."""
    url = normalise_url(url)
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            folder = Path(parsed.database).parent
            try:
                folder.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise ServiceUnavailable(
                    f"cannot use the data dir {folder} for the embedded database: "
                    f"{exc.strerror or exc}; set FARM_DATA_DIR to a writable directory "
                    "(or FARM_DATABASE_URL)") from exc
        engine = create_engine(url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    # JIT compiles report queries for longer than they run; nothing here profits from it.
    options: dict[str, Any] = {"connect_args": {"options": "-c jit=off"}}
    if connections == 0:
        return create_engine(url, poolclass=NullPool, **options)
    if connections is not None:
        options |= {"pool_size": connections, "max_overflow": 0}
    return create_engine(url, pool_pre_ping=True, **options)


# Any fixed number: every `farm db upgrade` against one PostgreSQL takes the same lock.
_MIGRATION_LOCK = 0x5FA12


def _alembic_config(engine: Engine, connection: Connection | None = None) -> Any:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(resources.files("migrations")))
    config.attributes["engine"] = engine
    config.attributes["connection"] = connection
    return config


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Migrate to ``revision``; on PostgreSQL under an advisory lock, so that two
    concurrent upgrades run one after the other instead of racing."""
    from alembic import command

    try:
        connection = engine.connect()
    except OperationalError as exc:
        raise database_unreachable(str(engine.url), exc) from exc
    with connection:
        if engine.dialect.name == "postgresql":
            connection.execute(text("SELECT pg_advisory_lock(:key)"), {"key": _MIGRATION_LOCK})
            connection.commit()
        try:
            command.upgrade(_alembic_config(engine, connection), revision)
        finally:
            if engine.dialect.name == "postgresql":
                connection.execute(text("SELECT pg_advisory_unlock(:key)"),
                                   {"key": _MIGRATION_LOCK})
                connection.commit()


def schema_head() -> str:
    """The newest migration's revision, from the file names alone (``NNNN_what.py`` holds
    revision ``NNNN``; tests/integration/test_store.py checks that Alembic agrees): reading
    it costs no Alembic import, which every command that opens the store would pay."""
    names = (entry.name for entry in resources.files("migrations").joinpath("versions").iterdir())
    return max(name[:4] for name in names if name[:4].isdigit() and name.endswith(".py"))


def current_revision(connection: Connection) -> str | None:
    """The store's schema revision (``alembic_version``), or None before any migration."""
    if "alembic_version" not in inspect(connection).get_table_names():
        return None
    revision = connection.scalar(text("SELECT version_num FROM alembic_version"))
    return None if revision is None else str(revision)


def require_current_schema(engine: Engine) -> None:
    """Refuse to work on a database whose schema is older (or newer) than this farm's."""
    head = schema_head()
    try:
        with engine.connect() as connection:
            current = current_revision(connection)
    except OperationalError as exc:
        raise database_unreachable(str(engine.url), exc) from exc
    if current != head:
        raise RuntimeFarmError(f"the database {redact_url(str(engine.url))} is at schema "
                               f"{current or 'none'}, this farm needs {head}: run `farm db "
                               "upgrade` (once, from the coordinator)")


def downgrade(engine: Engine, revision: str = "base") -> None:
    """Migrate the store down to ``revision`` (default ``base``: no tables left)."""
    from alembic import command

    command.downgrade(_alembic_config(engine), revision)


def table_names(engine: Engine) -> list[str]:
    """The names of the tables in the store, sorted."""
    return sorted(inspect(engine).get_table_names())


@contextmanager
def connected(url: str) -> Iterator[Engine]:
    """An engine for ``url``, disposed on the way out."""
    engine = make_engine(url)
    try:
        yield engine
    finally:
        engine.dispose()


@contextmanager
def open_store(settings: Settings) -> Iterator[Engine]:
    """The result store at the current schema: the embedded SQLite is migrated in place (as
    `farm run` does); a shared PostgreSQL must have been upgraded with `farm db upgrade`."""
    with connected(settings.database_url) as engine:
        if "campaign" not in table_names(engine):
            raise ConfigError(f"the store {redact_url(settings.database_url)} holds no "
                              "results yet; run `farm run MATRIX` first")
        at_schema_head(engine, migrate=settings.embedded)
        yield engine


def at_schema_head(engine: Engine, migrate: bool) -> None:
    """The store at this farm's schema: migrated in place where ``migrate`` (an embedded
    SQLite file, as `farm run` does), else required to be there already (a shared
    PostgreSQL is upgraded once, with `farm db upgrade`)."""
    if not migrate:
        require_current_schema(engine)
        return
    with engine.connect() as connection:
        current = current_revision(connection)
    if current != schema_head():
        upgrade(engine)
