"""Alembic environment: the engine comes from the farm (``farm.store.db.upgrade``).

Nothing here imports ``farm``: a revision runs as it was written, whatever the farm's code
is now. No ``target_metadata`` either, since nothing autogenerates revisions
(tests/integration/test_store.py compares the migrated schema with the models itself).
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection, Engine

config = context.config
engine = config.attributes.get("engine")
if not isinstance(engine, Engine):
    raise RuntimeError("run migrations through `farm db upgrade`, which supplies the engine")


def _migrate(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=None,
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
