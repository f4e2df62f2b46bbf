"""A bisect: the commit between a good and a bad one where a series of a matrix's job
changed, each step a stored campaign, each decision with its error rate and their total
bounded (docs/bisect.md; the decisions: ``farm.stats.bisect``; the steps:
``farm.workflows.bisect_steps``). ``bisect_target`` refuses every bad input before
anything is built; ``bisect_plan`` and ``run_bisect`` return the typed plan and answer,
whose ``as_json`` is what ``--format json`` writes."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.matrix.spec import JobSpec
from farm.stats.bisect import Measure, Outcome, Plan, bisect, end_jobs
from farm.stats.history import series_label
from farm.stats.intervals import log_interval
from farm.workflows.bisect_steps import (
    SeriesEvidence,
    StepRunner,
    Target,
    arms,
    design,
    step_campaign,
)


@dataclass(frozen=True)
class Commit:
    """A commit and its subject line."""

    commit: str
    subject: str


@dataclass(frozen=True)
class Step:
    """One step's decision and its evidence: the commit's value against good (the ends'
    step: bad's) and its change, with 95% intervals (None where there is none)."""

    commit: str
    subject: str
    verdict: str
    level: float
    p_value: float | None
    rounds: int
    value: float | None
    low: float | None
    high: float | None
    change: float | None
    change_low: float | None
    change_high: float | None
    pairs: int
    build_seconds: float
    skipped: str | None


@dataclass(frozen=True)
class SeriesAnswer:
    """One series' search: its answer, the first bad commit when found, the commits still
    in range and every step."""

    series: str
    label: str
    design: str
    answer: str
    first_bad: Commit | None
    spent: float
    range: list[str]
    steps: list[Step]


@dataclass(frozen=True)
class Cost:
    """What a bisect spent in this call: builds, jobs, pairs, minutes, commits skipped."""

    builds: int
    build_seconds: float
    jobs: int
    pairs: int
    minutes: float
    skipped: dict[str, str]


@dataclass(frozen=True)
class Searched:
    """What a bisect searches: the matrix, good and bad, the commits after good, the job."""

    matrix: str
    good: str
    bad: str
    commits: int
    job: str
    job_label: str


@dataclass(frozen=True)
class BisectAnswer(Searched):
    """``farm bisect``'s answer."""

    alpha: float
    series: list[SeriesAnswer]
    cost: Cost

    def as_json(self) -> dict[str, Any]:
        """The answer as ``--format json`` writes it (``farm.report.bisect`` reads it)."""
        return asdict(self)


@dataclass(frozen=True)
class BisectPlan(Searched):
    """``farm bisect --dry-run``'s plan: the commits, each step's error rate, the cost."""

    listed: list[tuple[str, str]]  # the commits after good, as "list"
    series: list[str]
    alpha: float
    share: float
    decisions: int
    rounds: int
    builds: int
    jobs: tuple[int, int]
    pairs: tuple[int, int]
    minutes: tuple[float, float] | None
    stored: str | None

    def as_json(self) -> dict[str, Any]:
        """The plan as ``--format json`` writes it."""
        return {"list" if key == "listed" else key: value for key, value in asdict(self).items()}


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


def bisect_target(path: Path, good: str, bad: str, job: str | None, clone: Path | None,
                  clean: Callable[[str], str]) -> tuple[Target, JobSpec]:
    """What to search, every bad input refused (exit 2) before anything is built. The
    commits are listed in the source's repository, or in ``clone`` (--clone) when the
    source is a URL (the workers of a fleet fetch it). A commit's subject is its author's
    text: ``clean`` makes it fit for every output, once, here."""
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
    commits = [(commit, clean(subject)) for commit, subject in
               first_parent_commits(listing, good_commit, bad_commit, f"{path}: build")]
    spec = _pick_job(path, load_matrix(path, frozenset(), bad_commit)[1], job)
    good_subject = clean(commit_subject(listing, good_commit, f"{path}: build"))
    return Target(path, matrix.campaign, spec.comparable_key, (good_commit, good_subject),
                  tuple(commits)), spec


def _interval(measure: Measure | None) -> tuple[float | None, ...]:
    """A measure on the ratio scale with its 95% interval (None where there is none)."""
    if measure is None or not math.isfinite(measure.log):
        return None, None, None
    low, high = (log_interval(measure.log, measure.total_se, measure.total_df)
                 if measure.total_se > 0 else (math.exp(measure.log),) * 2)
    return tuple(value if math.isfinite(value) else None
                 for value in (math.exp(measure.log), low, high))


def _series_answer(name: str, outcome: Outcome, evidence: SeriesEvidence) -> SeriesAnswer:
    runner, target = evidence.runner, evidence.runner.target
    last = len(target.commits)
    steps = []
    for step in outcome.steps:
        value, low, high = _interval(evidence.values.get(last if step.index == 0
                                                         else step.index))
        change, change_low, change_high = _interval(step.to_good)
        steps.append(Step(
            target.commit(step.index or last),
            ("good vs bad: " if step.index == 0 else "") + target.subject(step.index or last),
            step.verdict, step.level, step.p_value if math.isfinite(step.p_value) else None,
            step.rounds, value, low, high, change, change_low, change_high,
            evidence.pairs(step.index),
            sum(runner.build_seconds.get(index, 0.0) for index in (
                (0, last) if step.index == 0 else (step.index,))),
            runner.skipped.get(step.index)))
    first = (Commit(target.commit(outcome.high), target.subject(outcome.high))
             if outcome.answer == "found" else None)
    return SeriesAnswer(name, series_label(name), design(name), outcome.answer, first,
                        outcome.spent, [target.commit(index) for index in
                                        range(outcome.low + 1, outcome.high + 1)], steps)


def _cost(runner: StepRunner) -> Cost:
    jobs = [job for job in runner.jobs.values() if job is not None]
    return Cost(len(runner.build_seconds), sum(runner.build_seconds.values()), len(jobs),
                sum(job.pairs for job in jobs),
                sum(job.seconds for job in jobs if math.isfinite(job.seconds)) / 60,
                {runner.target.commit(index): why for index, why in runner.skipped.items()})


def _searched(target: Target, spec: JobSpec) -> tuple[str, str, str, int, str, str]:
    """``Searched``'s fields."""
    label = " · ".join(part for part in (spec.model.name, spec.variant.name,
                                         spec.varying_text) if part)
    return (str(target.matrix), target.commit(0), target.commit(len(target.commits)),
            len(target.commits), spec.comparable_key, label)


def bisect_plan(spec: JobSpec, names: list[str], plan: Plan,
                runner: StepRunner) -> BisectPlan:
    """The dry run's plan: the commits, each step's error rate and the expected cost (from
    the store's latest finished job of the target); builds and runs nothing."""
    target = runner.target
    # A job per arm a step; the ends replicate (``end_jobs``).
    roles = sorted({role for name in names for role in arms(name)})
    least = len(roles) * (plan.decisions + end_jobs(1))
    most = len(roles) * (plan.decisions * plan.rounds + end_jobs(plan.rounds))
    campaigns = [step_campaign(target.campaign, commit, target.commit(0), role, 1)
                 for commit, _ in target.commits for role in roles]
    stored, seconds = runner.stored(campaigns)
    return BisectPlan(
        *_searched(target, spec), list(target.commits),
        [series_label(name) for name in names], plan.alpha, plan.share, plan.decisions,
        plan.rounds, 2 + plan.decisions, (least, most), (spec.pairs, spec.max_pairs),
        (least * seconds / 60, most * seconds / 60)
        if seconds and math.isfinite(seconds) else None,
        "some steps are stored already: reused, not run again" if stored else None)


def run_bisect(spec: JobSpec, names: list[str], plan: Plan, runner: StepRunner
               ) -> BisectAnswer:
    """Each series searched in turn over ``runner``'s steps (a step measured for one series
    is read again for the next, not run again); the answer and the cost."""
    target = runner.target
    results = []
    for name in names:
        evidence = SeriesEvidence(runner, name)
        results.append(_series_answer(name, bisect(plan, evidence), evidence))
    return BisectAnswer(*_searched(target, spec), plan.alpha, results, _cost(runner))
