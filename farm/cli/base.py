"""The ``farm`` group and its error handling. Exit codes: 0 success, 2 bad input, 1 runtime
failure, 3 a regression found (``--fail-on-regression``), 130 interrupted."""

from __future__ import annotations

from typing import Any

import click

from farm.errors import FarmError
from farm.unreachable import service_error


class FarmGroup(click.Group):
    """Turns every ``FarmError``, and a database or broker that does not answer, into one
    message and an exit code, never a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an expected failure becomes one ``error:`` line and its exit code."""
        try:
            return super().invoke(ctx)
        except FarmError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: servers stopped, finished runs kept; run the same "
                       "command again to resume", err=True)
            ctx.exit(130)
        except Exception as exc:
            unavailable = service_error(exc)
            if unavailable is None:
                raise
            click.echo(f"error: {unavailable}", err=True)
            ctx.exit(unavailable.exit_code)


@click.group(cls=FarmGroup)
@click.version_option(package_name="specfarm")
def cli() -> None:
    """specfarm: measure llama.cpp speculative decoding (MTP, n-gram, draft) properly."""
