"""The ``farm`` command. Exit codes: 0 success, 2 bad input, 1 runtime failure."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import Any

import click
from rich.console import Console

from farm.errors import FarmError, JobsFailed
from farm.settings import load_settings, redact_url


class FarmGroup(click.Group):
    """Turns every ``FarmError`` into its message and exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except FarmError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: servers stopped, finished runs kept; run the same "
                       "command again to resume", err=True)
            ctx.exit(130)


def _sigterm_as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@click.group(cls=FarmGroup)
@click.version_option(package_name="specfarm")
def cli() -> None:
    """specfarm: measure llama.cpp speculative decoding (MTP, n-gram, draft) properly."""


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the expanded jobs and their argv.")
def run(matrix: Path, dry_run: bool) -> None:
    """Run MATRIX on this machine against real llama-server processes."""
    from farm.local import run_local
    from farm.report_cmd import show_report

    settings = load_settings()
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        campaign = run_local(matrix, settings, console, dry_run=dry_run)
    except JobsFailed as exc:
        show_report(settings, exc.campaign, "table")
        raise
    if campaign is not None:
        show_report(settings, campaign, "table")


@cli.command()
@click.argument("campaign", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]),
              default="table", show_default=True)
def report(campaign: str | None, fmt: str) -> None:
    """Show one row per job of CAMPAIGN (default: the latest)."""
    from farm.report_cmd import show_report

    show_report(load_settings(), campaign, fmt)


@cli.group()
def db() -> None:
    """Manage the result database (FARM_DATABASE_URL, default SQLite in the data dir)."""


@db.command("upgrade")
@click.option("--url", help="Database URL (default: FARM_DATABASE_URL or the embedded one).")
def db_upgrade(url: str | None) -> None:
    """Migrate the database to the newest schema."""
    from farm.store.db import make_engine, upgrade

    target = url or load_settings().database_url
    engine = make_engine(target)
    try:
        upgrade(engine)
    finally:
        engine.dispose()
    click.echo(f"database {redact_url(target)} is at the newest schema")


@cli.command()
def provision() -> None:
    """Build the CPU llama-server and fetch the tiny models (idempotent, cached)."""
    from workers.provision import provision as do_provision

    result = do_provision()
    click.echo(f"build cpu: {result.server}")
    for name, path in result.models.items():
        click.echo(f"model {name}: {path}")


def main() -> None:
    cli(prog_name="farm")
