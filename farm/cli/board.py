"""Results beyond one store (docs/board.md): ``farm share`` leaves a machine's campaigns as
one bundle file, ``farm board`` takes bundles from anyone into a board's store, recomputes
every figure, and shows the best speculative settings per model and GPU (with ``farm
recommend``'s prediction where engine curves exist) as text, markdown, JSON or a static
site, each through the format registry."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from farm.cli.base import cli
from farm.cli.output import output_options
from farm.errors import ConfigError
from farm.report import kinds
from farm.settings import load_settings

_BOARD = click.option("--board", "board_url", envvar="FARM_BOARD_URL", metavar="URL",
                      help="The board's store (default: board.db in the data dir; a "
                           "postgresql:// URL for a shared one). Env: FARM_BOARD_URL.")


@cli.command()
@click.argument("campaigns", nargs=-1, required=True)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="The bundle file to write (required unless --dry-run).")
@click.option("--with-host", is_flag=True,
              help="Keep host names in the runs (default: the data dir's random machine id "
                   "stands for the host).")
@click.option("--sign", "key", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Sign the bundle with this ed25519 private key (`farm board key PATH` "
                   "makes one).")
@click.option("--dry-run", is_flag=True, help="Print what would be shared; write nothing.")
def share(campaigns: tuple[str, ...], output: Path | None, with_host: bool, key: Path | None,
          dry_run: bool) -> None:
    """Leave CAMPAIGNS' finished jobs, every run with its telemetry and provenance, as one
    self-describing bundle file (no secrets, no database URLs, no host or user names)."""
    from farm.board.share import share_campaigns

    if output is None and not dry_run:
        raise ConfigError("farm share: give -o FILE for the bundle (or --dry-run to see "
                          "what would be shared)")
    for line in share_campaigns(load_settings(), list(campaigns), output, with_host=with_host,
                                key=key, dry_run=dry_run):
        click.echo(line)


@cli.group()
def board() -> None:
    """A board of results anyone shares: `farm board add BUNDLE...`, then `farm board show`
    or `farm board site -o DIR` (docs/board.md)."""


@board.command("add")
@click.argument("bundles", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_BOARD
@click.option("--require-signed", is_flag=True,
              help="Refuse bundles not signed by a key the board knows (`farm board trust`).")
def board_add(bundles: tuple[Path, ...], board_url: str | None, require_signed: bool) -> None:
    """Check BUNDLES and take their new jobs and runs onto the board, every figure
    recomputed; a bundle that fails any check changes nothing."""
    from farm.board.steps import add_bundles
    from farm.report.cells import clean

    console = Console(stderr=True)
    for path, added in add_bundles(load_settings(), board_url, bundles, require_signed):
        if added.known:
            click.echo(f"{path}: on the board already; nothing added")
            continue
        click.echo(f"{path}: {added.jobs} new jobs, {added.runs} new runs")
        # A reason may quote a stranger's spec: shown without control characters.
        for key, why in added.refused:
            click.echo(f"  refused job {key[:12]}: {clean(why)}")
        for line in added.differences:
            click.echo(f"  differs from its stated summary: {clean(line)}")
        for line in added.notes:
            console.print(f"  note: {clean(line)}", markup=False, soft_wrap=True)


@board.command("show")
@_BOARD
@output_options(kinds.Board)
def board_show(board_url: str | None, fmt: str, output: Path | None, wide: bool) -> None:
    """Per model x GPU x setting: the speedup and decode tok/s with intervals that treat
    machines as random effects, and the best setting per model and GPU."""
    from farm.report.formats import Target, write

    found = _view(board_url)
    write(found, fmt, Target(wide=wide, output=output))


@board.command("site")
@_BOARD
@click.option("-o", "--output", required=True, type=click.Path(file_okay=False,
                                                                   path_type=Path),
              help="The folder to write the site to (made if new; the site's own files "
                   "replaced, any other left).")
def board_site(board_url: str | None, output: Path) -> None:
    """Write the board as a static site: an index of models and GPUs, a page per model with
    its table and a plot of speedup against draft length, a page per bundle (the same as
    `farm board show --format site -o DIR`)."""
    from farm.report.formats import Target, write

    found = _view(board_url)
    write(found, "site", Target(output=output))


@board.command("trust")
@click.argument("public_key", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--name", required=True, help="The name the board shows for this key.")
@_BOARD
def board_trust(public_key: Path, name: str, board_url: str | None) -> None:
    """Know PUBLIC_KEY (a `farm board key` .pub file) as NAME: bundles it signed show as
    signed by NAME, and `--require-signed` takes them."""
    from farm.board.steps import trust_key

    click.echo(trust_key(load_settings(), board_url, public_key, name))


@board.command("key")
@click.argument("path", type=click.Path(dir_okay=False, path_type=Path))
def board_key(path: Path) -> None:
    """Make an ed25519 key pair: PATH (private, mode 0600) and PATH.pub (public, for a
    board's `farm board trust`)."""
    from farm.board.trust import make_key

    click.echo(make_key(path))


def _view(board_url: str | None) -> kinds.Board:
    from farm.board.steps import board_tables

    found = board_tables(load_settings(), board_url)
    return kinds.Board(rows=found.rows, best=found.best, bundles=found.bundles,
                       predictions=found.predictions)
