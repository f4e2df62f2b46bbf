"""``farm bisect``: the commit between a good and a bad one where a series of a matrix's job
changed, each step a stored campaign, each decision with its error rate and their total
bounded (docs/bisect.md; the decisions: ``farm.stats.bisect``)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from farm.cli.base import as_class_option, cli
from farm.cli.output import output_options
from farm.errors import ConfigError
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.report import kinds
from farm.report.cells import clean
from farm.settings import Settings, load_settings
from farm.stats.bisect import ALPHA, MIN_CHANGE, ROUNDS, Measure, Outcome, Plan, bisect
from farm.stats.intervals import log_interval

if TYPE_CHECKING:  # the steps read the store with pandas: loaded when a bisect runs
    from celery import Celery

    from farm.cli.bisect_steps import SeriesEvidence, StepRunner, Target

Pick = Callable[[Matrix, list[JobSpec]], tuple[Matrix, list[JobSpec]]]


def _pick_job(path: Path, specs: list[JobSpec], job: str | None) -> JobSpec:
    listed = "; ".join(f"{spec.comparable_key[:12]} {spec.variant.name}"
                       + (f" ({spec.varying_text})" if spec.varying_text else "")
                       for spec in specs)
    if job is None:
        if len(specs) == 1:
            return specs[0]
        raise ConfigError(f"{path}: the matrix has {len(specs)} jobs; a bisect follows one: "
                          f"give --job with its key or variant name: {listed}")
    found = [spec for spec in specs if job == spec.variant.name
             or (len(job) >= 8 and spec.comparable_key.startswith(job))]
    if len(found) != 1:
        raise ConfigError(f"{path}: --job {job!r} names {len(found) or 'no'} job"
                          f"{'s' if len(found) > 1 else ''} of the matrix; give a comparable "
                          f"key prefix (8+ hex digits) or variant name of one: {listed}")
    return found[0]


def _commit(git: str, ref: str, option: str) -> str:
    from farm.matrix.sources import resolve_commit

    try:
        return resolve_commit(git, ref, option)
    except ConfigError as exc:
        raise ConfigError(f"{option} {ref!r}: {git} has no such commit, branch or tag; give "
                          "one it has") from exc


def _target(path: Path, good: str, bad: str, job: str | None,
            clone: Path | None) -> tuple[Target, JobSpec]:
    """What to search, every bad input refused (exit 2) before anything is built. The
    commits are listed in the source's repository, or in ``clone`` (--clone) when the
    source is a URL (the workers of a fleet fetch it)."""
    from farm.cli.bisect_steps import Target
    from farm.matrix.load import load_matrix
    from farm.matrix.sources import commit_subject, first_parent_commits, require_repository

    matrix, specs = load_matrix(path)
    source = specs[0].build.source if specs else None
    if source is None:
        raise ConfigError(f"{path}: build: a bisect builds each commit: give a source build "
                          "`build: {name, git, ref}` (docs/builds.md)")
    listing = source.git if clone is None else require_repository(clone, "--clone")
    bad_commit = _commit(listing, bad, "--bad")
    good_commit = _commit(listing, good, "--good")
    # A commit's subject is its author's text: cleaned once, here, for every output.
    commits = [(commit, clean(subject)) for commit, subject in
               first_parent_commits(listing, good_commit, bad_commit, f"{path}: build")]
    spec = _pick_job(path, load_matrix(path, frozenset(), bad_commit)[1], job)
    good_subject = clean(commit_subject(listing, good_commit, f"{path}: build"))
    return Target(path, matrix.campaign, spec.comparable_key, (good_commit, good_subject),
                  tuple(commits)), spec


def _run_step(gpu_class: str | None, as_class: str | None, console: Console
              ) -> Callable[[Path, Settings, str, str, Pick], tuple[str, float | None]]:
    """Runs a step's job here (``farm run``'s path); returns its key and the seconds spent
    checking and making its builds: None for a job the store has finished already (not
    built or run again)."""
    def run(path: Path, settings: Settings, commit: str, older: str,
            pick: Pick) -> tuple[str, float | None]:
        from farm.cli.progress import RunProgress
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
                               pair_with=older, pick=pick,
                               say=lambda line: console.print(line, markup=False,
                                                              soft_wrap=True))
        seconds = time.monotonic() - started
        run_matrix(checked, settings, RunProgress(console))
        return checked.specs[0].job_key, seconds
    return run


def _fleet_app(settings: Settings, as_class: str | None) -> Celery:
    """--submit's Celery app: the fleet's store and broker set, no --as-class (the workers
    of the job's own class measure)."""
    from farm.fleet.app import make_app
    from farm.fleet.submit import require_fleet

    require_fleet(settings)
    if as_class is not None:
        raise ConfigError(f"--as-class {as_class}: with --submit each step runs on the "
                          "workers of the job's own class (--job picks the job)")
    return make_app(settings)


def _submit_step(console: Console, app: Celery
                 ) -> Callable[[Path, Settings, str, str, Pick], tuple[str, float | None]]:
    """Posts a step's job to the workers of its GPU class (``farm submit``'s path) and
    waits for it in the database; returns its key and the seconds its worker spent making
    its builds: None for a job the store has finished already. A coordinator stopped while
    waiting leaves the job to the fleet: the same command submits nothing twice, and reads
    or waits for it."""
    def run(path: Path, settings: Settings, commit: str, older: str,
            pick: Pick) -> tuple[str, float | None]:
        from farm.errors import JobsFailed
        from farm.fleet.submit import submit, wait_ended
        from farm.matrix.crossbuild import cross_build_specs
        from farm.matrix.load import load_matrix
        from farm.results.history import finished_job
        from farm.store.db import connected
        from workers.job.admission import on_coordinator
        from workers.paths import NodePaths

        loaded, specs = load_matrix(path, frozenset(), commit)
        matrix, specs = pick(loaded, cross_build_specs(specs, older))
        [spec] = specs
        with connected(settings.database_url) as engine:
            if finished_job(engine, spec.job_key):
                return spec.job_key, None
            submitted = submit(path, (matrix, specs), settings, app, engine,
                               admit=on_coordinator(NodePaths.of(settings)),
                               retry_failed=False)
            if submitted.unrunnable:
                raise ConfigError(f"{path}: the job of {matrix.campaign} cannot run on the "
                                  f"fleet: {submitted.unrunnable[0][1]}")
            console.print(f"{matrix.campaign}: on the workers of class {spec.gpu_class} "
                          "(Ctrl-C leaves it to them; the same command resumes)",
                          markup=False, soft_wrap=True)
            ended = wait_ended(engine, spec.job_key, lambda line: console.print(
                line, markup=False, soft_wrap=True))
        if ended.state != "done":  # the step is skipped (an end: the bisect stops)
            raise JobsFailed(f"job {spec.job_key[:12]} {ended.state} ({ended.failure_class})"
                             f": {ended.error}", matrix.campaign)
        return spec.job_key, ended.build_seconds or 0.0
    return run


def _interval(measure: Measure | None) -> tuple[float | None, ...]:
    """A measure on the ratio scale with its 95% interval (None where there is none)."""
    if measure is None or not math.isfinite(measure.log):
        return None, None, None
    low, high = (log_interval(measure.log, measure.total_se, measure.total_df)
                 if measure.total_se > 0 else (math.exp(measure.log),) * 2)
    return tuple(value if math.isfinite(value) else None
                 for value in (math.exp(measure.log), low, high))


def _result(name: str, outcome: Outcome, evidence: SeriesEvidence,
            target: Target) -> dict[str, Any]:
    from farm.cli.bisect_steps import design
    from farm.stats.history import series_label

    runner = evidence.runner
    steps = []
    for step in outcome.steps:
        value, low, high = _interval(evidence.values.get(len(target.commits) if step.index == 0
                                                         else step.index))
        change, change_low, change_high = _interval(step.to_good)
        steps.append({
            "commit": target.commit(step.index or len(target.commits)),
            "subject": ("good vs bad: " if step.index == 0 else "") + target.subject(
                step.index or len(target.commits)),
            "verdict": step.verdict, "level": step.level,
            "p_value": step.p_value if math.isfinite(step.p_value) else None,
            "rounds": step.rounds, "value": value, "low": low, "high": high,
            "change": change, "change_low": change_low, "change_high": change_high,
            "pairs": evidence.pairs(step.index),
            "build_seconds": sum(runner.build_seconds.get(index, 0.0) for index in (
                (0, len(target.commits)) if step.index == 0 else (step.index,))),
            "skipped": runner.skipped.get(step.index)})
    first = ({"commit": target.commit(outcome.high), "subject": target.subject(outcome.high)}
             if outcome.answer == "found" else None)
    return {"series": name, "label": series_label(name),
            "design": design(name),
            "answer": outcome.answer, "first_bad": first, "spent": outcome.spent,
            "range": [target.commit(index) for index in range(outcome.low + 1,
                                                              outcome.high + 1)],
            "steps": steps}


def _cost(runner: StepRunner) -> dict[str, Any]:
    jobs = [job for job in runner.jobs.values() if job is not None]
    return {"builds": len(runner.build_seconds), "build_seconds": sum(
        runner.build_seconds.values()), "jobs": len(jobs), "pairs": sum(job.pairs for job
                                                                        in jobs),
            "minutes": sum(job.seconds for job in jobs if math.isfinite(job.seconds)) / 60,
            "skipped": {runner.target.commit(index): why
                        for index, why in runner.skipped.items()}}


def _plan(target: Target, spec: JobSpec, names: list[str], plan: Plan,
          runner: StepRunner) -> dict[str, Any]:
    from farm.cli.bisect_steps import arms, step_campaign
    from farm.stats.bisect import end_jobs
    from farm.stats.history import series_label

    # A job per arm a step; the ends replicate (``end_jobs``).
    roles = sorted({role for name in names for role in arms(name)})
    least = len(roles) * (plan.decisions + end_jobs(1))
    most = len(roles) * (plan.decisions * plan.rounds + end_jobs(plan.rounds))
    campaigns = [step_campaign(target.campaign, commit, target.commit(0), role, 1)
                 for commit, _ in target.commits for role in roles]
    stored, seconds = runner.stored(campaigns)
    return {"matrix": str(target.matrix), "good": target.commit(0),
            "bad": target.commit(len(target.commits)), "commits": len(target.commits),
            "job": spec.comparable_key, "job_label": _label(spec),
            "list": list(target.commits), "series": [series_label(name) for name in names],
            "alpha": plan.alpha, "share": plan.share, "decisions": plan.decisions,
            "rounds": plan.rounds, "builds": 2 + plan.decisions,
            "jobs": [least, most], "pairs": [spec.pairs, spec.max_pairs],
            "minutes": [least * seconds / 60, most * seconds / 60]
            if seconds and math.isfinite(seconds) else None,
            "stored": "some steps are stored already: reused, not run again" if stored
            else None}


def _label(spec: JobSpec) -> str:
    return " · ".join(part for part in (spec.model.name, spec.variant.name,
                                        spec.varying_text) if part)


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
    from farm.cli.bisect_steps import SeriesEvidence, StepRunner, check_series
    from farm.report.formats import Target, write

    names = check_series(series_names or ("speedup",))
    settings = load_settings()
    app = _fleet_app(settings, as_class) if on_fleet else None
    target, spec = _target(matrix, good, bad, job, clone)
    console = Console(stderr=True)
    runner = StepRunner(target, settings, lambda line: console.print(line, markup=False,
                                                                      soft_wrap=True),
                        _submit_step(console, app) if app is not None
                        else _run_step(gpu_class, as_class, console))
    plan = Plan(len(target.commits), alpha, rounds, min_change / 100)
    if dry_run:
        found = _plan(target, spec, names, plan, runner)
        write(kinds.BisectPlan(found), fmt, Target(output=output))
        return
    results = []
    for name in names:
        evidence = SeriesEvidence(runner, name)
        results.append(_result(name, bisect(plan, evidence), evidence, target))
    answer = {"matrix": str(matrix), "good": target.commit(0),
              "bad": target.commit(len(target.commits)), "commits": len(target.commits),
              "job": spec.comparable_key, "job_label": _label(spec), "alpha": alpha,
              "series": results, "cost": _cost(runner)}
    write(kinds.BisectAnswer(answer), fmt, Target(output=output))
