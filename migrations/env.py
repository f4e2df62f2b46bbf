"""Alembic environment: the engine comes from the farm (``farm.store.db.upgrade``)."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, Engine

from farm.store.models import Base

config = context.config
engine = config.attributes.get("engine")
if not isinstance(engine, Engine):
    raise RuntimeError("run migrations through `farm db upgrade`, which supplies the engine")



def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=True,  # SQLite cannot ALTER most things; batch mode copies tables
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


given = config.attributes.get("connection")
if isinstance(given, Connection):
    _migrate(given)
    given.commit()
else:
    with engine.connect() as connection:
        _migrate(connection)
        connection.commit()
