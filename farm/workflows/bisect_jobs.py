"""The two ways a bisect's step job runs (``farm.workflows.bisect_steps.RunStep``): here,
on ``farm run``'s path, or posted to the fleet's workers of its GPU class, on ``farm
submit``'s path. What they tell goes to ``say``; a run here draws its progress on the
``farm.runner.Progress`` that ``progress`` makes for each step."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import ConfigError
from farm.settings import Settings
from farm.workflows.bisect_steps import Pick, RunStep

if TYPE_CHECKING:
    from celery import Celery

    from farm.runner import Progress


def run_here(gpu_class: str | None, as_class: str | None, say: Callable[[str], None],
             progress: Callable[[], Progress]) -> RunStep:
    """Runs a step's job here (``farm run``'s path); returns its key and the seconds spent
    checking and making its builds: None for a job the store has finished already (not
    built or run again)."""
    def run(path: Path, settings: Settings, commit: str, older: str,
            pick: Pick) -> tuple[str, float | None]:
        from farm.matrix.crossbuild import cross_build_specs
        from farm.matrix.load import load_matrix
        from farm.results.history import finished_job
        from farm.runner import check_matrix, run_matrix, this_machine
        from farm.store.db import connected, table_names

        matrix, specs = load_matrix(path, frozenset(), commit)
        [spec] = pick(matrix, cross_build_specs(specs, older))[1]
        with connected(settings.database_url) as engine:
            if "job" in table_names(engine) and finished_job(engine, spec.job_key):
                return spec.job_key, None
        started = time.monotonic()
        picked, run_as = this_machine(settings, gpu_class, as_class)
        checked = check_matrix(path, settings, gpu_class=picked, run_as=run_as, ref=commit,
                               pair_with=older, pick=pick, say=say)
        seconds = time.monotonic() - started
        run_matrix(checked, settings, progress())
        return checked.specs[0].job_key, seconds
    return run


def fleet_app(settings: Settings, as_class: str | None) -> Celery:
    """--submit's Celery app (``farm.workflows.fleet.fleet_app``), no --as-class (the
    workers of the job's own class measure)."""
    from farm.workflows.fleet import fleet_app as app_of

    app = app_of(settings)
    if as_class is not None:
        raise ConfigError(f"--as-class {as_class}: with --submit each step runs on the "
                          "workers of the job's own class (--job picks the job)")
    return app


def submit_step(say: Callable[[str], None], app: Celery) -> RunStep:
    """Posts a step's job to the workers of its GPU class (``farm submit``'s path) and
    waits for it in the database; returns its key and the seconds its worker spent making
    its builds: None for a job the store has finished already. A coordinator stopped while
    waiting leaves the job to the fleet: the same command submits nothing twice, and reads
    or waits for it."""
    def run(path: Path, settings: Settings, commit: str, older: str,
            pick: Pick) -> tuple[str, float | None]:
        from farm.matrix.crossbuild import cross_build_specs
        from farm.matrix.load import load_matrix
        from farm.results.history import finished_job
        from farm.store.db import connected
        from farm.workflows.fleet import post_and_wait

        loaded, specs = load_matrix(path, frozenset(), commit)
        matrix, specs = pick(loaded, cross_build_specs(specs, older))
        [spec] = specs
        with connected(settings.database_url) as engine:
            if finished_job(engine, spec.job_key):
                return spec.job_key, None
        [ended] = post_and_wait(path, (matrix, specs), settings, app, say)
        return spec.job_key, ended.build_seconds or 0.0
    return run
