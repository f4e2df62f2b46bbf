"""The output options every command that writes results takes, spelled the same, their
formats and help read from the registry (``farm.report.formats``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from farm.report.formats import FORMATS, formats_for

WIDE_HELP = ("Every column of the table, however wide (a narrow terminal hides the least "
             "needed ones and names them).")


def output_options(kind: type, *, default: str = "table", wide: bool = True,
                   wide_help: str = WIDE_HELP,
                   all_help: str | None = None) -> Callable[[FC], FC]:
    """``--format`` (each format that renders ``kind``), ``-o/--output`` (the chosen
    format, to a file), ``--wide`` (when the format is a table; ``wide_help`` where it
    shows more than the columns) and ``--all`` (with ``all_help``)."""
    formats = formats_for(kind)
    folders = [name for name in formats if FORMATS[name].folder]

    def decorate(command: FC) -> FC:
        options = [
            click.option("--format", "fmt", type=click.Choice(formats), default=default,
                         show_default=True, help="; ".join(
                             f"{name}: {FORMATS[name].help}" for name in formats) + "."),
            click.option("-o", "--output", type=click.Path(path_type=Path, dir_okay=bool(folders)),
                         help="Write the chosen format to this file instead of the terminal"
                              + (f" (a folder for {', '.join(folders)})." if folders
                                 else "."))]
        if wide and "table" in formats:
            options.append(click.option("--wide", is_flag=True, help=wide_help))
        if all_help:
            options.append(click.option("--all", "all_campaigns", is_flag=True,
                                        help=all_help))
        for option in reversed(options):
            command = option(command)
        return command
    return decorate
