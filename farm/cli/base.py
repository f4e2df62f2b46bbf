"""The ``farm`` group and its error handling. Exit codes: 0 success, 2 bad input, 1 runtime
failure, 3 a regression found (``--fail-on-regression``), 130 interrupted."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

from farm.errors import FarmError
from farm.report.cells import clean_lines
from farm.unreachable import service_error


class UsageProblem(click.UsageError):
    """A click usage error (an unknown option, a bad value: exit 2) shown with the farm's
    one prefix, ``error:``, where click writes ``Error:``."""

    def __init__(self, original: click.UsageError) -> None:
        super().__init__(original.format_message(), original.ctx)

    def show(self, file: IO[Any] | None = None) -> None:
        """The usage line and the help hint, then ``error: ...``."""
        if self.ctx is not None:
            click.echo(f"{self.ctx.get_usage()}\nTry '{self.ctx.command_path} -h' for help.\n",
                       file=file, err=True, color=self.ctx.color)
        click.echo(f"error: {self.format_message()}", file=file, err=True)


class CommandProblem(click.ClickException):
    """Any other click error (a file it cannot open: exit 1), with the ``error:`` prefix."""

    def show(self, file: IO[Any] | None = None) -> None:
        """``error: ...``."""
        click.echo(f"error: {self.format_message()}", file=file, err=True)


@contextmanager
def _one_prefix() -> Iterator[None]:
    try:
        yield
    except (UsageProblem, CommandProblem, click.exceptions.NoArgsIsHelpError):
        raise  # NoArgsIsHelpError: `farm db` alone shows its help, as asked
    except click.UsageError as exc:
        raise UsageProblem(exc) from exc
    except click.ClickException as exc:
        raise CommandProblem(exc.format_message()) from exc


class FarmGroup(click.Group):
    """Turns every ``FarmError``, and a database or broker that does not answer, into one
    message and an exit code, never a traceback; its subgroups are ``FarmGroup`` too."""

    group_class = type

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        """Parse the group's own options; a click error gets the farm's ``error:`` prefix."""
        with _one_prefix():
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        """Run the command; an expected failure becomes one ``error:`` line and its exit code."""
        try:
            with _one_prefix():
                return super().invoke(ctx)
        except FarmError as exc:
            # A job's error may quote a server's or a build's own lines.
            click.echo(f"error: {clean_lines(str(exc))}", err=True)
            ctx.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("interrupted: servers stopped, finished runs kept; run the same "
                       "command again to resume", err=True)
            ctx.exit(130)
        except Exception as exc:
            unavailable = _service_error(exc)
            if unavailable is None:
                raise
            click.echo(f"error: {unavailable}", err=True)
            ctx.exit(unavailable.exit_code)


def _service_error(exc: Exception) -> FarmError | None:
    """``service_error`` naming the URLs of this environment's settings, read only for a
    driver's error: a bad ``FARM_`` variable must not hide another failure's traceback."""
    from sqlalchemy.exc import DBAPIError

    from farm.retry import BROKER_ERRORS
    from farm.settings import load_settings

    if not isinstance(exc, (DBAPIError, *BROKER_ERRORS)):
        return None
    settings = load_settings()
    return service_error(exc, settings.database_url, settings.broker_url)


@click.group(cls=FarmGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="specfarm")
def cli() -> None:
    """specfarm: measure llama.cpp speculative decoding (MTP, n-gram, draft) properly."""
    from farm.settings import adopt_old_data_dir

    if note := adopt_old_data_dir():
        click.echo(note, err=True)


# `farm run`, `bisect` and `track`: where this machine's runs may join another class's.
as_class_option = click.option(
    "--as-class", metavar="CLASS",
    help="Run MATRIX's jobs of GPU class CLASS on this machine although it is another "
         "(FARM_GPU_CLASS, default `default`); each run records this machine's class.")
