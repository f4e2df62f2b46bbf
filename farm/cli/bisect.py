"""``farm bisect``: the commit between a good and a bad one where a series of a matrix's job
changed, each step a stored campaign, each decision with its error rate and their total
bounded (the workflow: ``farm.workflows.bisect``; docs/bisect.md)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from farm.cli.base import as_class_option, cli
from farm.cli.output import output_options
from farm.report import kinds
from farm.settings import load_settings
from farm.stats.bisect import ALPHA, MIN_CHANGE, ROUNDS, Plan


@cli.command(name="bisect")
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--good", required=True, metavar="REF",
              help="A commit, branch or tag of the matrix's source build where the series "
                   "is as it should be (an ancestor of --bad).")
@click.option("--bad", required=True, metavar="REF",
              help="A later commit, branch or tag where it changed.")
@click.option("--job", metavar="KEY",
              help="The job to follow when MATRIX has several: a comparable key prefix (8+ "
                   "hex digits) or its variant's name (the error lists them).")
@click.option("--series", "series_names", multiple=True, metavar="SERIES",
              help="What changed (repeatable; default speedup): speedup, baseline, variant "
                   "(decode tok/s), acceptance-N, acceptance-length, draft, verify (ms per "
                   "token); each measured in jobs of an arm's flags on good and on the "
                   "candidate.")
@click.option("--rounds", type=click.IntRange(1, 10), default=ROUNDS, show_default=True,
              help="Looks a step takes at most: one more job of the same design per look, "
                   "only while the step is too close to call (the ends run one job more: "
                   "two at their first look).")
@click.option("--alpha", type=click.FloatRange(0.001, 0.5), default=ALPHA, show_default=True,
              help="Bound on the chance that any decision of one series' search is wrong.")
@click.option("--min-change", type=click.FloatRange(0.1, 1000), default=MIN_CHANGE * 100,
              show_default=True, metavar="PERCENT",
              help="The smallest change worth finding: good and bad stop after one round "
                   "with no difference only when their interval rules out a change this "
                   "large; else they look again.")
@output_options(kinds.BisectAnswer, wide=False)
@click.option("--gpu-class", help="With several gpu-classes in MATRIX: the one to run here.")
@as_class_option
@click.option("--clone", type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="A local clone of MATRIX's source, where the commits between --good and "
                   "--bad are listed, when its build.git is a URL (as a fleet's is).")
@click.option("--submit", "on_fleet", is_flag=True,
              help="Run each step's job on the fleet's workers of its GPU class "
                   "(FARM_DATABASE_URL and FARM_BROKER_URL), waiting for it in the database.")
@click.option("--dry-run", is_flag=True,
              help="Print the commits, each step's error rate and the expected cost; build "
                   "and run nothing.")
def bisect_command(matrix: Path, good: str, bad: str, job: str | None,
                   series_names: tuple[str, ...], rounds: int, alpha: float,
                   min_change: float, fmt: str, output: Path | None,
                   gpu_class: str | None, as_class: str | None, clone: Path | None,
                   on_fleet: bool, dry_run: bool) -> None:
    """Find the first commit between --good and --bad where a series of MATRIX's job
    changed, running each step here (or, with --submit, on the fleet) as its own stored
    campaign (an interrupted bisect resumes; a second one reuses the steps)."""
    # The steps read the store with pandas: loaded when a bisect runs.
    from farm.cli.progress import RunProgress
    from farm.report.cells import clean
    from farm.report.formats import Target, write
    from farm.workflows.bisect import bisect_plan, bisect_target, run_bisect
    from farm.workflows.bisect_jobs import fleet_app, run_here, submit_step
    from farm.workflows.bisect_steps import StepRunner, check_series

    names = check_series(series_names or ("speedup",))
    settings = load_settings()
    app = fleet_app(settings, as_class) if on_fleet else None
    target, spec = bisect_target(matrix, good, bad, job, clone, clean)
    console = Console(stderr=True)

    def say(line: str) -> None:
        console.print(line, markup=False, soft_wrap=True)

    runner = StepRunner(target, settings, say, submit_step(say, app) if app is not None
                        else run_here(gpu_class, as_class, say, lambda: RunProgress(console)))
    plan = Plan(len(target.commits), alpha, rounds, min_change / 100)
    if dry_run:
        planned = bisect_plan(spec, names, plan, runner)
        write(kinds.BisectPlan(planned.as_json()), fmt, Target(output=output))
        return
    answer = run_bisect(spec, names, plan, runner)
    write(kinds.BisectAnswer(answer.as_json()), fmt, Target(output=output))
