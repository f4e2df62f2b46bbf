"""A bisect's measurements: each step's jobs run as their own stored campaigns
(``MATRIX-CAMPAIGN.bisect.GOOD-COMMIT[.variant][.ROUND]``), read back as
``farm.stats.bisect.Measure``s. A step already stored is read, not run again, so an
interrupted bisect resumes and a second one reuses it.

Every series is measured in jobs across builds (``farm.matrix.crossbuild``: one arm's
flags on good against the same flags on the candidate, in alternating blocks of one job),
so a drift of the machine between jobs cancels: the tok/s series as the job's speedup, the
variant's acceptance and costs block against block (``farm.stats.history.cross_series``),
the speedup as the variant arm's job over the baseline arm's. The ends run two such jobs
from their first look: their spread, and every other replicate's, is the series' variance
between jobs (``farm.stats.bisect.Jobs``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from farm.errors import BuildFailed, ConfigError, JobsFailed, RuntimeFarmError
from farm.matrix.schema import Matrix
from farm.matrix.spec import ArmRole, JobSpec
from farm.results.history import JobSeries, finished_job
from farm.settings import Settings
from farm.stats.bisect import PRIOR, Contrasts, Jobs, Measure, combine, paired_contrasts
from farm.stats.history import BASELINE, SPEEDUP, VARIANT, Estimate
from farm.store.db import connected, table_names

Pick = Callable[[Matrix, list[JobSpec]], tuple[Matrix, list[JobSpec]]]
# Runs a step's job (a matrix at a commit, paired with an older one, picked down to one job):
# its key and the seconds its builds took, None for a job the store had finished already.
RunStep = Callable[[Path, Settings, str, str, Pick], tuple[str, float | None]]


def arms(series: str) -> tuple[ArmRole, ...]:
    """The arms whose jobs across builds measure ``series``: the baseline's tok/s its own,
    the speedup both (the variant's over the baseline's), every other the variant's."""
    found: dict[str, tuple[ArmRole, ...]] = {BASELINE: ("baseline",),
                                             SPEEDUP: ("variant", "baseline")}
    return found.get(series, ("variant",))


def design(series: str) -> str:
    """How a report says ``series`` was measured."""
    if series == SPEEDUP:
        return ("each arm on good against it on the candidate in one job, the variant's "
                "change over the baseline's")
    return f"the {arms(series)[0]} arm on good against it on the candidate in one job"


@dataclass(frozen=True)
class Target:
    """What a bisect searches: the matrix, its job (by comparable key), good and the
    commits after it (index 1..n, bad the last) with their subject lines."""

    matrix: Path
    campaign: str
    key: str
    good: tuple[str, str]
    commits: tuple[tuple[str, str], ...]

    def commit(self, index: int) -> str:
        """The commit at ``index`` (0: good)."""
        return (self.good if index == 0 else self.commits[index - 1])[0]

    def subject(self, index: int) -> str:
        """Its subject line."""
        return (self.good if index == 0 else self.commits[index - 1])[1]


def step_campaign(campaign: str, commit: str, older: str, role: ArmRole, rounds: int) -> str:
    """The campaign a step's job is stored in: one per commit against good, arm and round
    (the baseline arm's without a suffix, as earlier bisects stored it)."""
    name = f"{campaign}.bisect.{older[:12]}-{commit[:12]}"
    name += "" if role == "baseline" else f".{role}"
    return name if rounds == 1 else f"{name}.{rounds}"


def _renamed(spec: JobSpec, campaign: str) -> JobSpec:
    return JobSpec.model_validate({**spec.model_dump(), "campaign": campaign})


@dataclass
class StepRunner:
    """Runs (or finds stored) the jobs of a bisect's steps; remembers what each cost and
    which commits could not be built or run."""

    target: Target
    settings: Settings
    say: Callable[[str], None]
    run: RunStep
    jobs: dict[tuple[int, ArmRole, int], JobSeries | None] = field(default_factory=dict)
    # Seconds spent checking and making each commit's build in this call (none for a
    # commit whose jobs were all stored already).
    build_seconds: dict[int, float] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)
    good_spec: JobSpec | None = None  # the target job at good, read when first needed

    def job(self, index: int, role: ArmRole, rounds: int) -> JobSeries | None:
        """The finished job of ``role``'s arm on good against it on commit ``index``, round
        ``rounds``; None when the commit cannot be built or its job fails."""
        if (index, role, rounds) not in self.jobs:
            self.jobs[index, role, rounds] = (None if index in self.skipped
                                              else self._job(index, role, rounds))
        return self.jobs[index, role, rounds]

    def _job(self, index: int, role: ArmRole, rounds: int) -> JobSeries | None:
        target = self.target
        commit, older = target.commit(index), target.commit(0)
        campaign = step_campaign(target.campaign, commit, older, role, rounds)
        wanted = self._cross_key(role)

        def pick(matrix: Matrix, specs: list[JobSpec]) -> tuple[Matrix, list[JobSpec]]:
            chosen = [_renamed(spec, campaign) for spec in specs
                      if spec.cross_key("baseline") == wanted]
            return matrix.model_copy(update={"campaign": campaign}), chosen

        started = time.monotonic()
        try:
            job_key, seconds = self.run(target.matrix, self.settings, commit, older, pick)
        except (BuildFailed, JobsFailed) as exc:
            if index in (0, len(target.commits)):
                raise RuntimeFarmError(f"{'good' if index == 0 else 'bad'} commit "
                                       f"{commit[:12]} cannot be measured: {exc}") from exc
            self.skipped[index] = str(exc).splitlines()[0]
            self.build_seconds[index] = time.monotonic() - started
            self.say(f"skipped {commit[:12]} ({target.subject(index)}): {self.skipped[index]}")
            return None
        if seconds is not None:  # both builds checked (good's made once, with the first)
            self.build_seconds[index] = self.build_seconds.get(index, 0.0) + seconds
            self.build_seconds.setdefault(0, 0.0)
        with connected(self.settings.database_url) as engine:
            found = finished_job(engine, job_key)
        if found is None:
            raise RuntimeFarmError(f"job {job_key[:12]} of {campaign} did not finish")
        self.say(f"{campaign}: stored already, reused" if seconds is None else
                 f"{campaign}: built and measured in {time.monotonic() - started:.0f} s")
        return found

    def _cross_key(self, role: ArmRole) -> str:
        """The comparable key of ``role``'s jobs across builds (the matrix read once)."""
        if self.good_spec is None:
            from farm.matrix.load import load_matrix

            specs = load_matrix(self.target.matrix, frozenset(), self.target.commit(0))[1]
            [self.good_spec] = [spec for spec in specs
                                if spec.comparable_key == self.target.key]
        return self.good_spec.cross_key(role)

    def stored(self, campaign_names: list[str]) -> tuple[bool, float | None]:
        """For the dry run's plan: whether the store holds any of these campaigns, and how
        long the latest finished job of the target ran."""
        from sqlalchemy import select

        from farm.results.history import last_job_seconds
        from farm.store.models import Campaign

        with connected(self.settings.database_url) as engine:
            if "campaign" not in table_names(engine):
                return False, None
            with engine.connect() as connection:
                found = connection.scalar(select(Campaign.id).where(
                    Campaign.name.in_(campaign_names)).limit(1)) is not None
            return found, last_job_seconds(engine, self.target.key)


def _measure(estimate: Estimate | None) -> Measure:
    if estimate is None or not estimate.value > 0:
        return Measure(math.nan, math.nan, math.nan)
    return Measure(math.log(estimate.value), estimate.log_se, estimate.df)


@dataclass
class SeriesEvidence:
    """``farm.stats.bisect.Evidence`` for one series, from a ``StepRunner``'s jobs: each
    job's measure of a commit against good, pooled with the spread between jobs."""

    runner: StepRunner
    series: str
    jobs: Jobs = field(default_factory=lambda: Jobs(PRIOR))
    ends_jobs: int = 0
    values: dict[int, Measure] = field(default_factory=dict)

    def _job_measure(self, index: int, number: int) -> Measure | None:
        """log(commit ``index`` / good) from its ``number``-th jobs; None when it cannot
        be measured."""
        found = []
        for role in arms(self.series):
            job = self.runner.job(index, role, number)
            if job is None:
                return None
            found.append(job)
        if self.series == SPEEDUP:
            variant, baseline = (_measure(job.series.get(SPEEDUP)) for job in found)
            return combine((1.0, variant), (-1.0, baseline))
        [job] = found
        return _measure(job.series.get(SPEEDUP) if self.series in (BASELINE, VARIANT)
                        else job.across.get(self.series))

    def _pooled(self, index: int, jobs: int) -> Measure | None:
        while self.jobs.count(index) < jobs:
            measure = self._job_measure(index, self.jobs.count(index) + 1)
            if measure is None:
                return None
            self.jobs.add(index, measure)
        self.values[index] = self.jobs.pooled(index, jobs)
        return self.values[index]

    def ends(self, jobs: int) -> Measure:
        """log(bad / good) over bad's first ``jobs`` jobs."""
        self.ends_jobs = jobs
        found = self._pooled(len(self.runner.target.commits), jobs)
        assert found is not None  # a bad commit that cannot be measured raised
        return found

    def candidate(self, index: int, rounds: int) -> Contrasts | None:
        """Candidate ``index`` against the ends; None when it cannot be measured."""
        found = self._pooled(index, rounds)
        if found is None:
            return None
        last = len(self.runner.target.commits)
        return paired_contrasts(found, self.jobs.pooled(last, self.ends_jobs))

    def pairs(self, index: int) -> int:
        """The pairs measured for commit ``index`` (0: the ends, bad's)."""
        where = index or len(self.runner.target.commits)
        return sum(job.pairs for (at, role, _), job in self.runner.jobs.items()
                   if at == where and role in arms(self.series) and job is not None)


def check_series(names: tuple[str, ...]) -> list[str]:
    """``--series`` values as series names; a ConfigError naming the known ones."""
    from farm.stats.history import ACCEPTANCE, DRAFT_COST, LENGTH, VERIFY_COST

    short = {"speedup": SPEEDUP, "baseline": BASELINE, "variant": VARIANT,
             "acceptance-length": LENGTH, "draft": DRAFT_COST, "verify": VERIFY_COST}
    known = {**short, **{name: name for name in short.values()}}
    found = []
    for name in names:
        if name in known:
            found.append(known[name])
        elif name.replace("-", "_").removeprefix(ACCEPTANCE).isdigit() and name.replace(
                "-", "_").startswith(ACCEPTANCE):
            found.append(name.replace("-", "_"))
        else:
            raise ConfigError(f"--series {name!r}: give one of {', '.join(short)}, "
                              "acceptance-N (acceptance at draft position N, from 1) or a "
                              "series name `farm history` shows (e.g. draft_ms_per_token)")
    return list(dict.fromkeys(found))
