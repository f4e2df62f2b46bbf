"""``farm track``: a matrix at a ref's current commit, once per commit (a nightly history
from one cron line: docs/history.md)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click
from rich.console import Console

from farm.cli.base import as_class_option, cli
from farm.errors import ConfigError
from farm.matrix.spec import JobSpec
from farm.settings import Settings, load_settings
from farm.words import plural


def _commits(specs: list[JobSpec]) -> list[str]:
    return sorted({arm.build.source.commit for spec in specs
                   for arm in (spec.baseline, spec.variant) if arm.build.source is not None})


def _stored(settings: Settings, specs: list[JobSpec]) -> dict[str, str]:
    """The states of the matrix's jobs the store already holds (none in a new store)."""
    from farm.store.db import connected, table_names
    from farm.store.repo import stored_states

    with connected(settings.database_url) as engine:
        if "job" not in table_names(engine):
            return {}
        return stored_states(engine, [spec.job_key for spec in specs])


def _previous(settings: Settings, specs: list[JobSpec]) -> str | None:
    """The newest commit, other than the one ``specs`` run, that the store holds finished
    jobs of these comparable keys for (the last tracked commit), or None."""
    from farm.results.history import tracked_builds
    from farm.store.db import connected, table_names

    at = set(_commits(specs))
    with connected(settings.database_url) as engine:
        if "job" not in table_names(engine):
            return None
        try:
            builds = tracked_builds(engine, sorted({spec.comparable_key for spec in specs}))
        except ConfigError:
            return None
    earlier = [commit for commit in builds["commit"] if commit and commit not in at]
    return earlier[-1] if earlier else None


def _run_here(matrix: Path, ref: str, settings: Settings,
              classes: tuple[str | None, str | None], older: str | None) -> None:
    """The matrix at ``ref`` run here, then (``older``) its arms paired across builds."""
    from farm.cli.progress import RunProgress
    from farm.cli.show import show_report
    from farm.runner import check_matrix, run_matrix, this_machine

    console = Console(stderr=True)
    picked, run_as = this_machine(settings, *classes)
    for pair_with in (None, older) if older else (None,):
        checked = check_matrix(matrix, settings, gpu_class=picked, run_as=run_as, ref=ref,
                               pair_with=pair_with,
                               say=lambda line: console.print(line, markup=False,
                                                              soft_wrap=True))
        campaign = run_matrix(checked, settings, RunProgress(console))
    show_report(settings, campaign, "table")


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
    from farm.matrix.crossbuild import cross_build_specs
    from farm.matrix.load import load_matrix

    settings = load_settings()
    if as_class is not None and not (settings.embedded or settings.broker_url is None):
        raise ConfigError(f"--as-class {as_class}: on a fleet `farm track` submits each "
                          "class's jobs to its workers; run it without --as-class")
    loaded = load_matrix(matrix, frozenset(), ref)
    campaign, specs = loaded[0].campaign, loaded[1]
    at = ", ".join(commit[:12] for commit in _commits(specs))
    older = _previous(settings, specs) if paired else None
    if older is not None:
        click.echo(f"paired with the last tracked commit {older[:12]}")
        specs = specs + cross_build_specs(specs, older)
        loaded = (loaded[0], specs)
    stored = _stored(settings, specs)
    if len(stored) == len(specs):
        states = ", ".join(f"{n} {state}" for state, n in sorted(Counter(stored.values())
                                                                  .items()))
        click.echo(f"{ref} is at {at}: already tracked (campaign {campaign}: {states}); "
                   "nothing to do")
        return
    click.echo(f"{ref} is at {at}: {plural(len(specs) - len(stored), 'new job')} in campaign "
               f"{campaign}")
    if settings.embedded or settings.broker_url is None:
        _run_here(matrix, ref, settings, (gpu_class, as_class), older)
        return
    from farm.fleet.app import make_app
    from farm.fleet.submit import submit
    from farm.store.db import connected
    from workers.job.admission import on_coordinator
    from workers.paths import NodePaths

    with connected(settings.database_url) as engine:
        result = submit(matrix, loaded, settings, make_app(settings), engine,
                        admit=on_coordinator(NodePaths.of(settings)), retry_failed=False)
    click.echo(f"campaign {result.campaign}: posted {plural(sum(result.posted.values()), 'job')}")
    if result.unrunnable:
        for spec, reason in result.unrunnable:
            click.echo(f"cannot run {spec.job_key[:10]} {spec.variant.name}: {reason}",
                       err=True)
        raise click.exceptions.Exit(1)
