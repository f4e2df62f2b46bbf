"""``farm bisect``'s measurements: each step's job run here as its own stored campaign
(``MATRIX-CAMPAIGN.bisect.COMMIT[.ROUND]``, or ``...bisect.GOOD-COMMIT`` for a job across
builds), read back as ``farm.stats.bisect.Measure``s. A step already stored is read, not
run again, so an interrupted bisect resumes and a second one reuses it.

The tok/s series are measured in one job across builds (the arm on good against the arm on
the candidate: ``farm.matrix.crossbuild``, a crossover interval); every other series from
each commit's own job of the matrix (``farm.stats.history.job_series``).
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
from farm.stats.bisect import Contrasts, Measure, combine, job_contrasts, paired_contrasts, pooled
from farm.stats.history import BASELINE, SPEEDUP, VARIANT, Estimate
from farm.store.db import connected, table_names

# The series measured in one job across builds of this arm.
PAIRED: dict[str, ArmRole] = {BASELINE: "baseline", VARIANT: "variant"}


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


def step_campaign(campaign: str, commit: str, older: str | None, rounds: int) -> str:
    """The campaign a step's job is stored in: one per commit (and good, across builds) and
    round."""
    name = f"{campaign}.bisect.{older[:12] + '-' if older else ''}{commit[:12]}"
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
    run: Callable[[Path, Settings, str, str | None, Callable[[Matrix, list[JobSpec]],
                                                                tuple[Matrix, list[JobSpec]]]],
                  tuple[str, float | None]]
    jobs: dict[tuple[int, str | None, int], JobSeries | None] = field(default_factory=dict)
    # Seconds spent checking and making each commit's build in this call (none for a
    # commit whose jobs were all stored already).
    build_seconds: dict[int, float] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)

    def job(self, index: int, role: ArmRole | None, rounds: int) -> JobSeries | None:
        """The finished job of commit ``index`` (with ``role``: that arm on good against
        it) in round ``rounds``; None when the commit cannot be built or its job fails."""
        if (index, role, rounds) not in self.jobs:
            self.jobs[index, role, rounds] = (None if index in self.skipped
                                              else self._job(index, role, rounds))
        return self.jobs[index, role, rounds]

    def _job(self, index: int, role: ArmRole | None, rounds: int) -> JobSeries | None:
        target = self.target
        commit = target.commit(index)
        older = target.commit(0) if role is not None else None
        campaign = step_campaign(target.campaign, commit, older, rounds)

        def pick(matrix: Matrix, specs: list[JobSpec]) -> tuple[Matrix, list[JobSpec]]:
            chosen = [_renamed(spec, campaign) for spec in specs
                      if (spec.cross_key("baseline") if role else spec.comparable_key)
                      == self._wanted(role)]
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
        if seconds is not None:
            self.build_seconds[index] = self.build_seconds.get(index, 0.0) + seconds
        with connected(self.settings.database_url) as engine:
            found = finished_job(engine, job_key)
        if found is None:
            raise RuntimeFarmError(f"job {job_key[:12]} of {campaign} did not finish")
        self.say(f"{campaign}: stored already, reused" if seconds is None else
                 f"{campaign}: built and measured in {time.monotonic() - started:.0f} s")
        return found

    def _wanted(self, role: ArmRole | None) -> str:
        return self.target.key if role is None else self._cross_key(role)

    def _cross_key(self, role: ArmRole) -> str:
        from farm.matrix.load import load_matrix

        specs = load_matrix(self.target.matrix, frozenset(), self.target.commit(0))[1]
        [spec] = [spec for spec in specs if spec.comparable_key == self.target.key]
        return spec.cross_key(role)

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
    """``farm.stats.bisect.Evidence`` for one series, from a ``StepRunner``'s jobs."""

    runner: StepRunner
    series: str
    ends_rounds: int = 0
    values: dict[int, Measure] = field(default_factory=dict)

    @property
    def role(self) -> ArmRole | None:
        """The arm measured across builds, or None: each commit's own job."""
        return PAIRED.get(self.series)

    def _rounds(self, index: int, rounds: int) -> Measure | None:
        measures = []
        for number in range(1, rounds + 1):
            job = self.runner.job(index, self.role, number)
            if job is None:
                return None
            measures.append(_measure(job.series.get(SPEEDUP if self.role else self.series)))
        found = pooled(measures)
        self.values[index] = found
        return found

    def _ends(self, rounds: int) -> tuple[Measure, Measure | None]:
        """bad (against good, or its own) and good's own (None across builds)."""
        last = len(self.runner.target.commits)
        bad = self._rounds(last, rounds)
        good = None if self.role else self._rounds(0, rounds)
        assert bad is not None  # a bad commit that cannot be measured raised
        return bad, good

    def ends(self, rounds: int) -> Measure:
        """log(bad / good) over ``rounds`` rounds."""
        self.ends_rounds = rounds
        bad, good = self._ends(rounds)
        return bad if good is None else combine((1.0, bad), (-1.0, good))

    def candidate(self, index: int, rounds: int) -> Contrasts | None:
        """Candidate ``index`` against the ends; None when it cannot be measured."""
        found = self._rounds(index, rounds)
        if found is None:
            return None
        bad, good = self._ends(self.ends_rounds)
        return paired_contrasts(found, bad) if good is None else job_contrasts(good, bad,
                                                                              found)

    def pairs(self, index: int) -> int:
        """The pairs measured for ``index`` (with good's, for the ends' own jobs)."""
        last = len(self.runner.target.commits)
        indices = (index,) if index else (last,) if self.role else (0, last)
        return sum(job.pairs for (where, role, _), job in self.runner.jobs.items()
                   if where in indices and role == self.role and job is not None)


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
