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
from farm.unreachable import service_error


class FarmGroup(click.Group):
    """Turns every ``FarmError``, and a database or broker that does not answer, into one
    message and an exit code, never a traceback."""

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
        except Exception as exc:
            unavailable = service_error(exc)
            if unavailable is None:
                raise
            click.echo(f"error: {unavailable}", err=True)
            ctx.exit(unavailable.exit_code)


def _sigterm_as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@click.group(cls=FarmGroup)
@click.version_option(package_name="specfarm")
def cli() -> None:
    """specfarm: measure llama.cpp speculative decoding (MTP, n-gram, draft) properly."""


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the expanded jobs and their argv.")
@click.option("--gpu-class", help="With several gpu-classes in MATRIX: the one to run here.")
def run(matrix: Path, dry_run: bool, gpu_class: str | None) -> None:
    """Run MATRIX on this machine against real llama-server processes."""
    from farm.local import run_local
    from farm.report_cmd import show_report

    settings = load_settings()
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    try:
        campaign = run_local(matrix, settings, console, dry_run=dry_run, gpu_class=gpu_class)
    except JobsFailed as exc:
        show_report(settings, exc.campaign, "table")
        raise
    if campaign is not None:
        show_report(settings, campaign, "table")


@cli.command()
@click.argument("campaign", required=False)
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json", "html"]),
              default="table", show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="File to write (--format html: a self-contained page with plots).")
@click.option("--all", "all_campaigns", is_flag=True, help="Every campaign in the store.")
@click.option("--group-by", type=click.Choice(["gpu_class", "worker", "model", "variant"]),
              help="Aggregate jobs: geometric-mean speedup per group.")
@click.option("--by-category", is_flag=True, help="Speedup per prompt category.")
def report(campaign: str | None, fmt: str, output: Path | None, all_campaigns: bool,
           group_by: str | None, by_category: bool) -> None:
    """Show one row per job of CAMPAIGN (default: the latest)."""
    from farm.report_cmd import show_report

    show_report(load_settings(), campaign, fmt, all_campaigns=all_campaigns,
                group_by=group_by, by_category=by_category, output=output)


@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--build-a", help="Only A's jobs on this build (two builds of one campaign).")
@click.option("--build-b", help="Only B's jobs on this build.")
@click.option("--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table",
              show_default=True)
def compare(a: str, b: str, build_a: str | None, build_b: str | None, fmt: str) -> None:
    """Campaigns A and B (or two builds) side by side: change per matching job, and
    whether it is outside the noise."""
    from farm.compare import compare as do_compare
    from farm.compare import compare_table
    from farm.report import to_json
    from farm.report_cmd import open_store

    engine = open_store(load_settings())
    try:
        frame = do_compare(engine, a, b, build_a=build_a, build_b=build_b)
    finally:
        engine.dispose()
    if fmt == "table":
        Console(width=200).print(compare_table(frame, a, b))
    elif fmt == "json":
        click.echo(to_json(frame))
    else:
        click.echo(frame.to_csv(index=False), nl=False)


@cli.command()
@click.argument("campaign", required=False)
@click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv",
              show_default=True)
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True)
def export(campaign: str | None, fmt: str, output: Path) -> None:
    """Write the tidy runs of CAMPAIGN (default: the latest), one row per run."""
    from farm.report_cmd import export_runs

    count = export_runs(load_settings(), campaign, fmt, output)
    click.echo(f"wrote {count} runs to {output}")


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
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print the expanded jobs and their argv.")
@click.option("--retry-failed", is_flag=True, help="Post failed jobs again (attempts reset).")
@click.option("--retry-cancelled", is_flag=True,
              help="Post cancelled jobs again (attempts reset).")
def submit(matrix: Path, dry_run: bool, retry_failed: bool, retry_cancelled: bool) -> None:
    """Store MATRIX as a campaign and post every job not done whose message is not already
    waiting in the broker; running jobs are left alone."""
    from farm.fleet.app import make_app
    from farm.fleet.submit import require_fleet
    from farm.fleet.submit import submit as do_submit
    from farm.local import print_dry_run
    from farm.matrix.load import load_matrix
    from farm.report import wide_console
    from farm.store.db import make_engine

    if dry_run:
        print_dry_run(load_matrix(matrix, resolve=False)[1], wide_console())
        return
    settings = load_settings()
    require_fleet(settings)
    loaded = load_matrix(matrix, resolve=False)  # bad input fails before services are touched
    app, engine = make_app(settings), make_engine(settings.database_url)
    try:
        result = do_submit(matrix, loaded, settings, app, engine, retry_failed=retry_failed,
                           retry_cancelled=retry_cancelled)
    finally:
        engine.dispose()
    posted = ", ".join(f"{n} to {queue}" for queue, n in sorted(result.posted.items()))
    already = ", ".join(f"{n} {state}" for state, n in sorted(result.already.items()))
    click.echo(f"campaign {result.campaign}: {result.jobs} jobs; posted {posted or 'none'}"
               + (f"; not posted: {already}" if already else ""))
    for spec, reason in result.unrunnable:
        click.echo(f"cannot run {spec.job_key[:10]} {spec.model.name} {spec.variant.name}: "
                   f"{reason}", err=True)
    if result.unrunnable:
        raise click.exceptions.Exit(1)


@cli.command()
@click.argument("campaign", required=False)
def status(campaign: str | None) -> None:
    """Jobs of CAMPAIGN (default: the latest) by state, who runs what, failures, time left."""
    from farm.fleet.status import campaign_status, render_status
    from farm.report_cmd import open_store

    settings = load_settings()
    engine = open_store(settings)
    # Embedded jobs never go through a broker: none waits to be posted.
    repost_after = None if settings.embedded else settings.repost_after
    try:
        render_status(campaign_status(engine, campaign, repost_after), Console())
    finally:
        engine.dispose()


@cli.command()
def workers() -> None:
    """Registered workers, live and dead, with their builds and models."""
    from farm.fleet.status import render_workers
    from farm.fleet.submit import require_fleet
    from farm.store.db import make_engine

    settings = load_settings()
    require_fleet(settings)
    engine = make_engine(settings.database_url)
    try:
        render_workers(engine, Console(), live_within=settings.lease_seconds)
    finally:
        engine.dispose()


@cli.command()
@click.argument("campaign")
def cancel(campaign: str) -> None:
    """Cancel CAMPAIGN's pending jobs and stop its running ones."""
    from farm.fleet.submit import cancel as do_cancel
    from farm.fleet.submit import require_fleet
    from farm.store.db import make_engine

    settings = load_settings()
    require_fleet(settings)
    engine = make_engine(settings.database_url)
    try:
        count = do_cancel(engine, campaign)
    finally:
        engine.dispose()
    click.echo(f"campaign {campaign}: {count} jobs cancelled")


def _devices(value: str | None) -> list[int] | None:
    if value is None:
        return None
    try:
        return [int(item) for item in value.split(",") if item.strip()]
    except ValueError as exc:
        raise click.BadParameter("a comma list of GPU indices, e.g. 0,1") from exc


@cli.command()
@click.option("--gpu-class", help="The class this worker serves (queue gpu.CLASS).")
@click.option("--devices", help="GPU indices, e.g. 0 or 0,1 for a tensor-split set.")
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Worker config: name, gpu-class, devices, models-dir, builds.")
def worker(gpu_class: str | None, devices: str | None, config_path: Path | None) -> None:
    """Run a Celery worker for one GPU (or GPU set): concurrency 1, late acks."""
    from workers.config import load_worker_config
    from workers.daemon import run_worker

    if not gpu_class and not config_path:
        raise click.UsageError("give --gpu-class or a --config that names one")
    config = load_worker_config(config_path, gpu_class=gpu_class, devices=_devices(devices))
    run_worker(load_settings(), config)


@cli.command()
@click.option("--port", default=5555, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True)
def flower(port: int, address: str) -> None:
    """Start Flower on the farm's broker, with basic auth from FARM_FLOWER_AUTH."""
    from farm.errors import ConfigError
    from farm.fleet.app import make_app

    settings = load_settings()
    if not settings.flower_auth or ":" not in settings.flower_auth:
        raise ConfigError("set FARM_FLOWER_AUTH=user:password; Flower is never started "
                          "without authentication")
    make_app(settings).start(["flower", f"--port={port}", f"--address={address}",
                              f"--basic-auth={settings.flower_auth}"])


@cli.command("build")
@click.argument("name")
@click.option("--source", required=True,
              help="Git URL or repository (with --ref), a llama.cpp tree, an sdist .tar.gz, "
                   "or pypi:PACKAGE==VERSION.")
@click.option("--ref", help="Branch, tag, commit or pull/N/head of a git source.")
@click.option("--backend", type=click.Choice(["cpu", "cuda", "metal", "vulkan"]),
              default="cpu", show_default=True)
@click.option("--cuda-arch", help="CMAKE_CUDA_ARCHITECTURES, e.g. 86;89;90 (default native).")
@click.option("--cmake-arg", "cmake_args", multiple=True, help="Extra -D... for cmake.")
@click.option("--target", "targets", multiple=True, default=["llama-server"],
              show_default=True, help="cmake targets to build.")
@click.option("--build-number", type=int, help="For sources without git history.")
@click.option("--dry-run", is_flag=True, help="Print the cmake commands; build nothing.")
def build_command(name: str, source: str, ref: str | None, backend: str,
                  cuda_arch: str | None, cmake_args: tuple[str, ...], targets: tuple[str, ...],
                  build_number: int | None, dry_run: bool) -> None:
    """Build llama-server as NAME (cached: the same build asked twice builds once)."""
    from typing import cast

    from workers.builds import Backend, BuildRequest, build, build_argv, configure_argv

    request = BuildRequest(name=name, source=source, ref=ref, backend=cast(Backend, backend),
                           cuda_architectures=cuda_arch, cmake_args=cmake_args,
                           targets=targets, build_number=build_number)
    if dry_run:
        tree, out = Path("<source>"), Path("<source>/build-specfarm-KEY")
        click.echo(" ".join(configure_argv(request, tree, out)))
        click.echo(" ".join(build_argv(out, request.targets)))
        return
    manifest = build(request)
    click.echo(f"build {manifest.name}: {manifest.server}")
    click.echo(manifest.version)


@cli.command("builds")
def builds_command() -> None:
    """The builds made on this node, with what each binary reports."""
    from rich.table import Table

    from workers.builds import all_manifests

    table = Table(title="builds", title_justify="left")
    for header in ("name", "backend", "source", "ref", "commit / sdist", "version"):
        table.add_column(header, overflow="fold")
    for manifest in all_manifests():
        table.add_row(manifest.name, manifest.backend, manifest.source, manifest.ref or "-",
                      (manifest.commit or manifest.sdist_sha256 or "-")[:12],
                      manifest.version.splitlines()[0])
    Console().print(table)


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
