"""``farm db``: the result database's schema (its steps: ``farm.workflows.database``)."""

from __future__ import annotations

import click

from farm.cli.base import cli
from farm.settings import load_settings, redact_url


@cli.group()
def db() -> None:
    """Manage the result database (FARM_DATABASE_URL, default SQLite in the data dir)."""


@db.command("upgrade")
@click.option("--url", help="Database URL (default: FARM_DATABASE_URL or the embedded one).")
def db_upgrade(url: str | None) -> None:
    """Migrate the database to the newest schema."""
    from farm.workflows.database import upgrade_database

    target = url or load_settings().database_url
    upgraded = upgrade_database(target)
    before, head, where = upgraded.before, upgraded.head, redact_url(target)
    if before is None:
        click.echo(f"database {where}: created the schema (revision {head})")
    elif before != head:
        click.echo(f"database {where}: upgraded the schema from revision {before} to {head}")
    else:
        click.echo(f"database {where} is already at the newest schema (revision {head})")


@db.command("grant-worker")
@click.argument("role")
@click.option("--url", help="Database URL (default: FARM_DATABASE_URL).")
def db_grant_worker(role: str, url: str | None) -> None:
    """Give the PostgreSQL ROLE what a GPU worker needs and nothing more: it can claim and
    run jobs and write their results, not create or change campaigns or job specs (run it
    after every `farm db upgrade`)."""
    from farm.workflows.database import grant_worker_role

    target = url or load_settings().database_url
    grant_worker_role(target, role)
    click.echo(f"role {role} may run jobs on {redact_url(target)}")
