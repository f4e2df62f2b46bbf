"""The fleet: ``farm submit``, ``status``, ``workers``, ``cancel``, ``worker``, ``flower``."""

from __future__ import annotations

import os
from pathlib import Path

import click
from rich.console import Console

from farm.cli.base import cli
from farm.errors import ConfigError
from farm.settings import Settings, load_settings
from farm.words import plural


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True,
              help="Check every job as a worker would, with this machine's builds and models, "
                   "and print the argv that would run; post nothing.")
@click.option("--retry-failed", is_flag=True, help="Post failed jobs again (attempts reset).")
@click.option("--retry-cancelled", is_flag=True,
              help="Post cancelled jobs again (attempts reset).")
@click.option("--allow-option", "allow_options", multiple=True, metavar="NAME",
              help="Let the matrix pass this harmless option beyond the farm's allow-list "
                   "(repeatable); each worker runs it only if its config allows it too.")
def submit(matrix: Path, dry_run: bool, retry_failed: bool, retry_cancelled: bool,
           allow_options: tuple[str, ...]) -> None:
    """Store MATRIX as a campaign and post every job not done whose message is not already
    waiting in the broker; running jobs are left alone. A matrix with `tune:` is raced:
    this command posts each round, waits for it and prints the answer (docs/tune.md)."""
    from farm.matrix.options import check_allowances
    from farm.workflows.fleet import check_as_submitted, submit_matrix
    from farm.workflows.tune import is_tune

    settings = load_settings()
    if is_tune(matrix):
        _race(matrix, settings, dry_run, retry_failed or retry_cancelled, allow_options)
        return
    allowed = check_allowances(allow_options, "--allow-option")
    if dry_run:
        from farm.cli.dry_run import print_worker_check

        print_worker_check(check_as_submitted(matrix, settings, allowed, click.echo), Console())
        return
    result = submit_matrix(matrix, settings, allowed, retry_failed=retry_failed,
                           retry_cancelled=retry_cancelled, say=click.echo)
    posted = ", ".join(f"{n} to {queue}" for queue, n in sorted(result.posted.items()))
    already = ", ".join(f"{n} {state}" for state, n in sorted(result.already.items()))
    click.echo(f"campaign {result.campaign}: {plural(result.jobs, 'job')}; "
               + (f"posted {posted or 'none'}" + (f"; not posted: {already}" if already else "")
                  if result.stored else "none a live worker can run: nothing stored"))
    for gpu_class in sorted(result.waiting):
        click.echo(f"class {gpu_class}: no live worker can run some jobs; they wait for a "
                   "stopped one to start (a Slurm array or KEDA scales on them: "
                   "docs/deployment.md)")
    for spec, reason in result.unrunnable:
        click.echo(f"cannot run {spec.job_key[:10]} {spec.model.name} {spec.variant.name}: "
                   f"{reason}", err=True)
    if result.unrunnable:
        raise click.exceptions.Exit(1)


def _race(matrix: Path, settings: Settings, dry_run: bool, retry: bool,
          allow_options: tuple[str, ...]) -> None:
    """``farm submit`` of a tune matrix: its race on the fleet (``farm.cli.tune.run_tune``)."""
    from farm.cli.tune import run_tune

    if retry or allow_options:
        raise ConfigError(f"{matrix}: tune: a race posts its rounds itself and takes no "
                          "--retry-failed, --retry-cancelled or --allow-option; a failed "
                          "round ends it (`farm report` shows why)")
    run_tune(matrix, settings, (None, None), "table", None, dry_run, fleet=True)


@cli.command()
@click.argument("campaign", required=False)
def status(campaign: str | None) -> None:
    """Jobs of CAMPAIGN (default: the latest) by state, who runs what, failures, time left."""
    from farm.report.status import render_status
    from farm.workflows.fleet import campaign_progress

    render_status(campaign_progress(load_settings(), campaign), Console())


@cli.command()
def workers() -> None:
    """Registered workers, live and dead, with their builds and models."""
    from farm.report.status import render_workers
    from farm.workflows.fleet import fleet_workers

    render_workers(fleet_workers(load_settings()))


@cli.command()
@click.argument("campaign")
def cancel(campaign: str) -> None:
    """Cancel CAMPAIGN's pending jobs and stop its running ones."""
    from farm.workflows.fleet import cancel_campaign

    count = cancel_campaign(load_settings(), campaign)
    click.echo(f"campaign {campaign}: {plural(count, 'job')} cancelled")


def parse_devices(value: str | None) -> list[int] | None:
    """``--devices 0,1`` as indices."""
    if value is None:
        return None
    try:
        return [int(item) for item in value.split(",") if item.strip()]
    except ValueError as exc:
        raise click.BadParameter("a comma list of GPU indices, e.g. 0,1",
                                 param_hint="'--devices'") from exc


@cli.command()
@click.option("--gpu-class", help="The class this worker serves (queue gpu.CLASS).")
@click.option("--devices", help="GPU indices, e.g. 0 or 0,1 for a tensor-split set.")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Worker config: name, gpu-class, devices, models-dir, builds.")
@click.option("--name", help="This worker's name (default: the config's, else "
                             "CLASS@HOST-DEVICES); one per running worker.")
@click.option("--selftest", "check_first", is_flag=True,
              help="Run `farm selftest` on this worker's devices and first build before "
                   "registering; a node that fails never joins.")
@click.option("--exit-when-idle", metavar="SECONDS",
              help="Exit once nothing was reserved and the store had no pending job of the "
                   "class for this long (frees an allocation's GPU).")
@click.option("--max-jobs", metavar="N", help="Exit after claiming N jobs.")
@click.option("--deadline", metavar="TIME",
              help="Be gone by TIME (ISO 8601, or seconds from now): claim no job whose "
                   "estimate ends later; 60 s before it, hand the running job back and exit. "
                   "Default under Slurm: the allocation's end (squeue's %e).")
def worker(gpu_class: str | None, devices: str | None, config_path: Path | None,
           name: str | None, check_first: bool, exit_when_idle: str | None,
           max_jobs: str | None, deadline: str | None) -> None:
    """Run a Celery worker for one GPU (or GPU set): concurrency 1, late acks."""
    from farm.workflows.fleet import WorkerOptions, prepare_worker, serve_worker

    if not gpu_class and not config_path:
        raise click.UsageError("give --gpu-class or a --config that names one")
    settings = load_settings()
    options = WorkerOptions(gpu_class=gpu_class, devices=parse_devices(devices),
                            devices_shown=devices, config_path=config_path, name=name,
                            exit_when_idle=exit_when_idle, max_jobs=max_jobs,
                            deadline=deadline)
    # Slurm's variables are read here, the one place below which nothing reads them.
    slurm = {key: value for key, value in os.environ.items()
             if key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID",
                        "SLURM_JOB_END_TIME")}
    prepared = prepare_worker(settings, options, slurm)
    if check_first:
        from farm.selftest import report_failures, selftest, testbed_for

        node = testbed_for(prepared.first_build, prepared.devices or None)
        report_failures(selftest(settings, node, Console()))
    serve_worker(settings, prepared)


@cli.command()
@click.option("--port", default=5555, show_default=True, help="The port Flower listens on.")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="The address Flower listens on (127.0.0.1: this machine only).")
def flower(port: int, address: str) -> None:
    """Start Flower on the farm's broker, with basic auth from FARM_FLOWER_AUTH."""
    from farm.fleet.app import make_app

    settings = load_settings()
    if not settings.flower_auth or ":" not in settings.flower_auth:
        raise ConfigError("set FARM_FLOWER_AUTH=user:password; Flower is never started "
                          "without authentication")
    make_app(settings).start(["flower", f"--port={port}", f"--address={address}",
                              f"--basic-auth={settings.flower_auth}"])
