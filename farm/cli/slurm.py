"""``farm slurm launch``: workers for a GPU class's pending jobs as a Slurm job array."""

from __future__ import annotations

from pathlib import Path

import click

from farm.cli.base import cli
from farm.settings import load_settings
from farm.words import plural


@cli.group()
def slurm() -> None:
    """Workers on a Slurm cluster (deploy/slurm/, docs/deployment.md)."""


@slurm.command("launch")
@click.argument("gpu_class", metavar="CLASS")
@click.argument("sbatch_options", nargs=-1, metavar="[-- SBATCH_OPTION...]")
@click.option("--cap", default=10, show_default=True, type=click.IntRange(min=1),
              help="Most array tasks (workers, one GPU each) to submit.")
@click.option("--script", type=click.Path(path_type=Path),
              help="The worker's sbatch script (default: a checkout's "
                   "deploy/slurm/specfarm-worker.sbatch).")
def slurm_launch(gpu_class: str, sbatch_options: tuple[str, ...], cap: int,
                 script: Path | None) -> None:
    """Submit one array task per pending job of CLASS in the store, up to --cap; each task
    runs a worker that drains the class and exits when idle. Options after `--` go to
    sbatch (e.g. -- --time=2:00:00 --partition=gpu)."""
    from farm.workflows.fleet_slurm import launch

    launched = launch(load_settings(), gpu_class, cap, script, sbatch_options)
    pending = plural(launched.pending, "pending job")
    if not launched.tasks:
        click.echo(f"class {gpu_class}: {pending}; nothing submitted")
        return
    click.echo(f"class {gpu_class}: {pending}; submitted array job {launched.array_job} "
               f"with {plural(launched.tasks, 'task')} (cap {cap})")
