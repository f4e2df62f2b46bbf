"""``farm run``: a matrix on this machine, in-process, on the embedded store."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType

import click
from rich.console import Console

from farm.cli.base import cli
from farm.errors import JobsFailed
from farm.settings import load_settings


def _sigterm_as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True,
              help="Make every check a run makes and print the argv that would run; run "
                   "nothing, write nothing.")
@click.option("--gpu-class", help="With several gpu-classes in MATRIX: the one to run here.")
@click.option("--allow-file-flags", is_flag=True,
              help="Let the matrix pass flags that make llama-server write files "
                   "(--log-file, --slot-save-path, ...).")
def run(matrix: Path, dry_run: bool, gpu_class: str | None, allow_file_flags: bool) -> None:
    """Run MATRIX on this machine against real llama-server processes."""
    from farm.local import run_local
    from farm.report.show import show_report

    settings = load_settings()
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        campaign = run_local(matrix, settings, console, dry_run=dry_run, gpu_class=gpu_class,
                             allow_file_flags=allow_file_flags)
    except JobsFailed as exc:
        show_report(settings, exc.campaign, "table")
        raise
    if campaign is not None:
        show_report(settings, campaign, "table")
