"""How a tune's round runs (``farm.workflows.tune.RunRound``): here, on ``farm run``'s
path, its progress drawn on the ``farm.runner.Progress`` that ``progress`` makes; or posted
to the fleet's workers of its GPU class, on ``farm submit``'s path, and waited for in the
store while this process decides the race."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from farm.settings import Settings
from farm.stats.race import FIRST_ROUND
from farm.workflows.tune import Pick, RunRound, race_plan, round_pick, tune_matrix

if TYPE_CHECKING:
    from farm.runner import CheckedMatrix, Progress


def check_round(path: Path, settings: Settings, pick: Pick, classes: tuple[str | None,
                str | None], say: Callable[[str], None], *,
                make_builds: bool = True) -> CheckedMatrix:
    """A round's jobs checked here as `farm run` checks a matrix (builds, models, every
    flag against the build's `--help`, a drafter's vocabulary): nothing started."""
    from farm.runner import check_matrix, this_machine

    picked, run_as = this_machine(settings, *classes)
    return check_matrix(path, settings, gpu_class=picked, run_as=run_as, pick=pick,
                        make_builds=make_builds, say=say)


def check_race(path: Path) -> int:
    """A tune's matrix and the race its `tune:` asks for checked (ConfigError naming the
    key); its number of candidates."""
    matrix, specs = tune_matrix(path)
    race_plan(path, matrix, len(specs))
    return len(specs)


def check_first_round(path: Path, settings: Settings,
                      classes: tuple[str | None, str | None], say: Callable[[str], None], *,
                      make_builds: bool = True) -> None:
    """A tune's matrix and race checked, then its first round's jobs as `farm run` checks
    them (``check_round``): every bad input refused before any server starts."""
    candidates = check_race(path)
    check_round(path, settings, round_pick(1, FIRST_ROUND, frozenset(range(candidates))),
                classes, say, make_builds=make_builds)


def run_here(settings: Settings, classes: tuple[str | None, str | None],
             say: Callable[[str], None], progress: Callable[[], Progress]) -> RunRound:
    """Runs a round's jobs here, each as `farm run` runs a job (``workers.lifecycle``);
    a job the store has finished is not run again."""
    def run(path: Path, pick: Pick) -> None:
        from farm.runner import run_matrix

        run_matrix(check_round(path, settings, pick, classes, say), settings, progress())
    return run


def submit_round(settings: Settings, say: Callable[[str], None]) -> RunRound:
    """Posts a round's jobs to the workers of the tune's GPU class and waits for them
    (``farm.workflows.fleet.post_and_wait``): a job that did not finish ends the race. A
    coordinator stopped while waiting leaves the round to the fleet; the same command
    posts nothing twice, and reads or waits. The fleet's store and broker are required
    here, before the race opens the store."""
    from farm.workflows.fleet import fleet_app, post_and_wait

    app = fleet_app(settings)

    def run(path: Path, pick: Pick) -> None:
        post_and_wait(path, pick(*tune_matrix(path)), settings, app, say)
    return run
