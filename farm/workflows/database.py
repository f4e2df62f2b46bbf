"""``farm db``'s steps on a result database: its schema migrated to the newest, a
PostgreSQL role given what a GPU worker needs."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Upgraded:
    """A database's schema revision before an upgrade (None: it had none) and after."""

    before: str | None
    head: str


def upgrade_database(url: str) -> Upgraded:
    """The database at ``url`` migrated to the newest schema."""
    from farm.store.db import connected, current_revision, schema_head, upgrade

    with connected(url) as engine:
        with engine.connect() as connection:
            before = current_revision(connection)
        upgrade(engine)
    return Upgraded(before, schema_head())


def grant_worker_role(url: str, role: str) -> None:
    """``role`` may claim and run jobs on the database at ``url`` (at the newest schema)
    and write their results, nothing more."""
    from farm.store.db import connected, require_current_schema
    from farm.store.roles import grant_worker

    with connected(url) as engine:
        require_current_schema(engine)
        grant_worker(engine, role)
