"""The fleet: ``farm submit``, ``status``, ``workers``, ``cancel``, ``worker``, ``flower``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import click
from rich.console import Console

from farm.cli.base import cli
from farm.errors import ConfigError, ModelUnavailable
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.settings import Settings, load_settings
from farm.words import plural


def _pinned(loaded: tuple[Matrix, list[JobSpec]], settings: Settings,
            ) -> tuple[Matrix, list[JobSpec]]:
    """The jobs with every Hub model's revision pinned to a commit, once, here: every
    worker then downloads the same bytes (huggingface_hub is loaded only when needed)."""
    matrix, specs = loaded
    if not any(spec.model.hf for spec in specs):
        return loaded
    from workers.setup.hub import HubAccess, pin_specs

    return matrix, pin_specs(specs, HubAccess.of(settings), settings.downloads_dir, click.echo)


def _dry_run(matrix: Path, settings: Settings, allow: frozenset[str]) -> None:
    # Imported only here: the node's runner brings pandas, a second of start-up that a
    # 10,000-job submit cannot spare.
    from farm.cli.dry_run import print_worker_check
    from farm.matrix.load import load_matrix
    from farm.runner import check_as_worker
    from workers.paths import NodePaths

    loaded, note = load_matrix(matrix, allow), None
    try:
        loaded = _pinned(loaded, settings)
    except ModelUnavailable as exc:  # a dry run still shows the jobs (with the revision)
        note = f"not pinned: {exc}"
    found = check_as_worker(matrix, *loaded, NodePaths.of(settings), allow)
    print_worker_check(replace(found, unchecked=[*filter(None, [note]), *found.unchecked]),
                       Console())


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
    waiting in the broker; running jobs are left alone."""
    from farm.fleet.app import make_app
    from farm.fleet.submit import require_fleet
    from farm.fleet.submit import submit as do_submit
    from farm.matrix.load import load_matrix
    from farm.matrix.options import check_allowances
    from farm.store.db import connected
    from workers.job.admission import on_coordinator
    from workers.paths import NodePaths

    settings = load_settings()
    allowed = check_allowances(allow_options, "--allow-option")
    if dry_run:
        _dry_run(matrix, settings, allowed)
        return
    require_fleet(settings)
    # Bad input fails before services are touched; Hub revisions are pinned before too.
    loaded = _pinned(load_matrix(matrix, allowed), settings)
    with connected(settings.database_url) as engine:
        result = do_submit(matrix, loaded, settings, make_app(settings), engine,
                           admit=on_coordinator(NodePaths.of(settings), allowed),
                           retry_failed=retry_failed, retry_cancelled=retry_cancelled)
    posted = ", ".join(f"{n} to {queue}" for queue, n in sorted(result.posted.items()))
    already = ", ".join(f"{n} {state}" for state, n in sorted(result.already.items()))
    click.echo(f"campaign {result.campaign}: {plural(result.jobs, 'job')}; "
               + (f"posted {posted or 'none'}" + (f"; not posted: {already}" if already else "")
                  if result.stored else "none a live worker can run: nothing stored"))
    for spec, reason in result.unrunnable:
        click.echo(f"cannot run {spec.job_key[:10]} {spec.model.name} {spec.variant.name}: "
                   f"{reason}", err=True)
    if result.unrunnable:
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("campaign", required=False)
def status(campaign: str | None) -> None:
    """Jobs of CAMPAIGN (default: the latest) by state, who runs what, failures, time left."""
    from farm.fleet.status import campaign_status
    from farm.report.status import render_status
    from farm.store.db import open_store
    from farm.store.leases import beat_seconds

    settings = load_settings()
    # Embedded jobs never go through a broker: none waits to be posted.
    repost_after = None if settings.embedded else settings.repost_after
    beat = None if settings.embedded else beat_seconds(settings.lease_seconds)
    with open_store(settings) as engine:
        render_status(campaign_status(engine, campaign, repost_after, beat), Console())


@cli.command()
def workers() -> None:
    """Registered workers, live and dead, with their builds and models."""
    from farm.fleet.status import worker_rows
    from farm.fleet.submit import require_fleet
    from farm.report.status import render_workers
    from farm.store.db import connected
    from farm.store.leases import beat_seconds

    settings = load_settings()
    require_fleet(settings)
    with connected(settings.database_url) as engine:
        render_workers(worker_rows(engine, beat_seconds(settings.lease_seconds),
                                   settings.lease_seconds))


@cli.command()
@click.argument("campaign")
def cancel(campaign: str) -> None:
    """Cancel CAMPAIGN's pending jobs and stop its running ones."""
    from farm.fleet.submit import cancel as do_cancel
    from farm.fleet.submit import require_fleet
    from farm.store.db import connected

    settings = load_settings()
    require_fleet(settings)
    with connected(settings.database_url) as engine:
        count = do_cancel(engine, campaign)
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
@click.option("--selftest", "check_first", is_flag=True,
              help="Run `farm selftest` on this worker's devices and first build before "
                   "registering; a node that fails never joins.")
def worker(gpu_class: str | None, devices: str | None, config_path: Path | None,
           check_first: bool) -> None:
    """Run a Celery worker for one GPU (or GPU set): concurrency 1, late acks."""
    from workers.fleet.config import load_worker_config
    from workers.fleet.daemon import run_worker
    from workers.paths import NodePaths

    if not gpu_class and not config_path:
        raise click.UsageError("give --gpu-class or a --config that names one")
    settings = load_settings()
    config = load_worker_config(config_path, NodePaths.of(settings), gpu_class=gpu_class,
                                devices=parse_devices(devices))
    if config.devices:
        from workers.job.telemetry.nvml import require_gpus

        require_gpus(config.devices, f"--devices {devices}" if devices else
                     f"{config_path}: devices")
    _require_own_name(settings, config.worker_name)
    if check_first:
        from rich.console import Console

        from farm.selftest import report_failures, selftest, testbed_for

        name, binary = next(iter(config.builds.items()))
        node = testbed_for({"name": name, "path": str(binary)}, config.devices or None)
        report_failures(selftest(settings, node, Console()))
    run_worker(settings, config)


def _require_own_name(settings: Settings, name: str) -> None:
    """Refuse to start a second worker under a name a running one of this host has (two
    workers of one class and devices get the same default name)."""
    import socket

    from farm.fleet.submit import require_fleet
    from farm.store.db import connected, require_current_schema
    from farm.store.registry import running_namesake

    require_fleet(settings)
    with connected(settings.database_url) as engine:
        require_current_schema(engine)
        pid = running_namesake(engine, name, socket.gethostname())
    if pid is not None:
        raise ConfigError(f"worker {name} already runs on this host (pid {pid}): give this one "
                          "its own `name:` in its --config file (the default, CLASS@HOST-"
                          "DEVICES, is the same for two workers of one class and devices)")


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
