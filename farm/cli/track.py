"""``farm track``: a matrix at a ref's current commit, once per commit (a nightly history
from one cron line: docs/history.md; the workflow: ``farm.workflows.track``)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from farm.cli.base import as_class_option, cli
from farm.settings import load_settings


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--ref", required=True,
              help="Branch, tag or pull/N/head every source build of MATRIX is taken at "
                   "(its current commit).")
@click.option("--gpu-class", help="With an embedded store and several gpu-classes in MATRIX: "
                                  "the one to run here.")
@as_class_option
@click.option("--paired", is_flag=True,
              help="Also run each job's arms on the last tracked commit against REF's in "
                   "one paired job per arm, so `farm history` reads their tok/s changes "
                   "from a crossover interval, free of the machine's drift between jobs "
                   "(docs/history.md). Costs about twice the pairs of a plain track.")
def track(matrix: Path, ref: str, gpu_class: str | None, as_class: str | None,
          paired: bool) -> None:
    """Run MATRIX with its source builds at REF's current commit, once per commit: on a
    fleet (FARM_DATABASE_URL and FARM_BROKER_URL set) its jobs are submitted, else run
    here. A commit whose jobs the store already holds is left alone (exit 0)."""
    from farm.cli.progress import RunProgress
    from farm.cli.show import show_report
    from farm.workflows.track import track as track_matrix

    settings = load_settings()
    console = Console(stderr=True)
    tracked = track_matrix(matrix, ref, settings, classes=(gpu_class, as_class), paired=paired,
                           echo=click.echo,
                           say=lambda line: console.print(line, markup=False, soft_wrap=True),
                           progress=lambda: RunProgress(console))
    if tracked.ran_here is not None:
        show_report(settings, tracked.ran_here, "table")
    for spec, reason in tracked.unrunnable:
        click.echo(f"cannot run {spec.job_key[:10]} {spec.variant.name}: {reason}", err=True)
    if tracked.unrunnable:
        raise click.exceptions.Exit(1)
