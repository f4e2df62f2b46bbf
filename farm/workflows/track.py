"""A track: a matrix at a ref's current commit, once per commit (a nightly history from
one cron line: docs/history.md), its jobs run here or, on a fleet, submitted. ``track``
tells its own lines to ``echo``, a check's to ``say``, and draws a run here on the
``farm.runner.Progress`` that ``progress`` makes."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import ConfigError
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.settings import Settings
from farm.words import plural

if TYPE_CHECKING:
    from farm.runner import Progress


@dataclass(frozen=True)
class Tracked:
    """What a track did: the campaign it ran here (None: none ran here), the jobs the
    fleet cannot run (each with why)."""

    ran_here: str | None = None
    unrunnable: list[tuple[JobSpec, str]] = field(default_factory=list)


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
              classes: tuple[str | None, str | None], older: str | None,
              say: Callable[[str], None], progress: Callable[[], Progress]) -> str:
    """The matrix at ``ref`` run here, then (``older``) its arms paired across builds; the
    campaign."""
    from farm.runner import check_matrix, run_matrix, this_machine

    picked, run_as = this_machine(settings, *classes)
    for pair_with in (None, older) if older else (None,):
        checked = check_matrix(matrix, settings, gpu_class=picked, run_as=run_as, ref=ref,
                               pair_with=pair_with, say=say)
        campaign = run_matrix(checked, settings, progress())
    return campaign


def _submit(matrix: Path, loaded: tuple[Matrix, list[JobSpec]], settings: Settings,
            echo: Callable[[str], None]) -> Tracked:
    from farm.fleet.app import make_app
    from farm.fleet.submit import submit
    from farm.store.db import connected
    from workers.job.admission import on_coordinator
    from workers.paths import NodePaths

    with connected(settings.database_url) as engine:
        result = submit(matrix, loaded, settings, make_app(settings), engine,
                        admit=on_coordinator(NodePaths.of(settings)), retry_failed=False)
    echo(f"campaign {result.campaign}: posted {plural(sum(result.posted.values()), 'job')}")
    return Tracked(unrunnable=list(result.unrunnable))


def track(matrix: Path, ref: str, settings: Settings, *,
          classes: tuple[str | None, str | None], paired: bool, echo: Callable[[str], None],
          say: Callable[[str], None], progress: Callable[[], Progress]) -> Tracked:
    """Runs ``matrix`` with its source builds at ``ref``'s current commit, once per commit:
    on a fleet (a broker and no embedded store) its jobs are submitted, else run here
    (``classes``: --gpu-class and --as-class). A commit whose jobs the store already holds
    is left alone. ``paired`` adds each job's arms on the last tracked commit against
    ``ref``'s."""
    from farm.matrix.crossbuild import cross_build_specs
    from farm.matrix.load import load_matrix

    here = settings.embedded or settings.broker_url is None
    if classes[1] is not None and not here:
        raise ConfigError(f"--as-class {classes[1]}: on a fleet `farm track` submits each "
                          "class's jobs to its workers; run it without --as-class")
    loaded = load_matrix(matrix, frozenset(), ref)
    campaign, specs = loaded[0].campaign, loaded[1]
    at = ", ".join(commit[:12] for commit in _commits(specs))
    older = _previous(settings, specs) if paired else None
    if older is not None:
        echo(f"paired with the last tracked commit {older[:12]}")
        specs = specs + cross_build_specs(specs, older)
        loaded = (loaded[0], specs)
    stored = _stored(settings, specs)
    if len(stored) == len(specs):
        states = ", ".join(f"{n} {state}" for state, n in sorted(Counter(stored.values())
                                                                  .items()))
        echo(f"{ref} is at {at}: already tracked (campaign {campaign}: {states}); "
             "nothing to do")
        return Tracked()
    echo(f"{ref} is at {at}: {plural(len(specs) - len(stored), 'new job')} in campaign "
         f"{campaign}")
    if here:
        return Tracked(ran_here=_run_here(matrix, ref, settings, classes, older, say,
                                          progress))
    return _submit(matrix, loaded, settings, echo)
