"""``farm submit`` and ``farm cancel``: campaigns into PostgreSQL, jobs onto Celery queues."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from celery import Celery
from kombu.exceptions import OperationalError
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from farm.errors import ConfigError
from farm.fleet.reconcile import reconcile
from farm.matrix.schema import Matrix
from farm.matrix.sources import source_allowed
from farm.matrix.spec import JobSpec
from farm.settings import Settings
from farm.store import repo
from farm.store.db import require_current_schema
from farm.store.models import Campaign, Job, JobState, Worker
from farm.store.registry import live_workers, stopped_workers
from farm.store.roles import require_owner
from farm.unreachable import broker_unreachable


def require_fleet(settings: Settings) -> None:
    """Refuse the embedded SQLite: workers on other machines need one shared PostgreSQL."""
    if settings.embedded:
        raise ConfigError("the fleet needs one shared PostgreSQL: set FARM_DATABASE_URL="
                          "postgresql://USER:PASSWORD@HOST/DB (on one machine, use `farm run`)")


def require_broker(app: Celery) -> None:
    """Fail before anything is stored if the broker does not answer."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=5)
    except OperationalError as exc:
        raise broker_unreachable(app.conf.broker_url, exc) from exc


def _why_unrunnable(spec: JobSpec, workers: list[Worker]) -> str | None:
    """None if some live worker of the job's class has its build and model (or can
    download it: a Hub or URL model), else why not."""
    of_class = [w for w in workers if w.gpu_class == spec.gpu_class]
    if not of_class:
        return (f"no live worker of GPU class {spec.gpu_class!r} (start one: farm worker "
                f"--gpu-class {spec.gpu_class})")
    named = {arm.build.name for arm in (spec.baseline, spec.variant) if arm.build.source is None}
    sources = sorted({arm.build.source.git for arm in (spec.baseline, spec.variant)
                      if arm.build.source is not None})
    with_build = [w for w in of_class if named <= set(w.builds)
                  and all(source_allowed(git, w.sources or []) for git in sources)]
    if not with_build and not named <= set().union(*(set(w.builds) for w in of_class)):
        return (f"no worker of class {spec.gpu_class!r} has build"
                f"{'s' if len(named) > 1 else ''} {', '.join(sorted(named))}")
    if not with_build:
        allowed = sorted({item for w in of_class for item in (w.sources or [])})
        return (f"no live worker of class {spec.gpu_class!r} builds from "
                f"{', '.join(sources)} (their allowed sources: {', '.join(allowed) or 'none'}); "
                "add it to a worker's `sources:` or name an allowed one in the matrix")
    if spec.model.remote:
        return None  # every worker downloads it itself (workers.setup.download)
    wanted = spec.model.path or spec.model.file or f"{spec.model.name}.gguf"
    if not any(wanted in w.models or Path(wanted).name in w.models for w in with_build):
        return (f"no worker of class {spec.gpu_class!r} with build {spec.build.name!r} has "
                f"model file {wanted!r} in its models dir")
    return None


@dataclass
class SubmitResult:
    """What ``farm submit`` did: posts per queue, jobs by state, jobs no live worker can run."""

    campaign: str
    jobs: int
    posted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    already: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unrunnable: list[tuple[JobSpec, str]] = field(default_factory=list)
    # Classes whose jobs only a stopped worker can run: stored and posted, they wait for
    # one to start (a Slurm array or a KEDA ScaledJob starts them on pending jobs).
    waiting: set[str] = field(default_factory=set)
    # False when no job could run: nothing was stored (no empty campaign left behind).
    stored: bool = True


def _reopen(session: Session, campaign_id: int, retry_failed: bool,
            retry_cancelled: bool) -> None:
    """Failed and cancelled jobs run again only when asked, with their attempts and the
    workers' refusals reset (an operator may have allowed the source since)."""
    states = [state for state, asked in ((JobState.FAILED, retry_failed),
                                         (JobState.CANCELLED, retry_cancelled)) if asked]
    if states:
        session.execute(update(Job).where(Job.campaign_id == campaign_id, Job.state.in_(states))
                        .values(state=JobState.QUEUED, attempt=0, error=None, posted_at=None,
                                due_at=None, refusals={}))


# What a job row must pass before it is stored: the check a worker makes of it, called
# with the matrix file, the matrix and its jobs (``workers.job.admission.on_coordinator``);
# it raises to refuse.
Admit = Callable[[Path, Matrix, Sequence[JobSpec]], None]


def submit(path: Path, loaded: tuple[Matrix, list[JobSpec]], settings: Settings, app: Celery,
           engine: Engine, *, admit: Admit, retry_failed: bool,
           retry_cancelled: bool = False) -> SubmitResult:
    """Admit every job (``admit``: a refusal stores and posts nothing), then store the
    campaign's jobs and post every pending one whose message is not in the broker;
    running jobs are left alone. When no live worker can run any job, nothing is stored."""
    matrix, specs = loaded
    admit(path, matrix, specs)
    require_current_schema(engine)
    require_owner(engine, "farm submit")
    require_broker(app)
    workers = live_workers(engine, timedelta(seconds=settings.lease_seconds))
    stopped = stopped_workers(engine)
    result = SubmitResult(campaign=matrix.campaign, jobs=len(specs))
    runnable = []
    for spec in specs:
        reason = _why_unrunnable(spec, workers)
        if reason and _why_unrunnable(spec, stopped) is None:
            result.waiting.add(spec.gpu_class)
            reason = None
        if reason:
            result.unrunnable.append((spec, reason))
        else:
            runnable.append(spec)
    if not runnable:
        result.stored = False
        return result
    with Session(engine) as session, session.begin():
        campaign = repo.ensure_campaign(session, matrix.campaign, str(path.resolve()))
        repo.ensure_jobs(session, campaign, runnable, settings.max_attempts)
        campaign_id = campaign.id
        _reopen(session, campaign_id, retry_failed, retry_cancelled)
    reconciled = reconcile(engine, app, settings.repost_after, campaign_id, recheck=True)
    for message in reconciled.posted:
        result.posted[message.queue] += 1
    with Session(engine) as session:
        rows = session.execute(select(Job.state, func.count())
                               .where(Job.campaign_id == campaign_id).group_by(Job.state))
        counts = {state: count for state, count in rows}
    waiting = counts.pop(JobState.QUEUED, 0) + counts.pop(JobState.LOST, 0) - len(reconciled.posted)
    result.already.update(counts, **({JobState.QUEUED: waiting} if waiting else {}))
    return result


def cancel(engine: Engine, campaign: str) -> int:
    """Cancel what is queued or running; running jobs stop when their lease renewal fails."""
    with Session(engine) as session, session.begin():
        campaign_id = session.scalar(select(Campaign.id).where(Campaign.name == campaign))
        if campaign_id is None:
            raise ConfigError(f"no campaign named {campaign!r}")
        rows = session.execute(
            update(Job).where(Job.campaign_id == campaign_id,
                              Job.state.in_((JobState.QUEUED, JobState.LOST, JobState.RUNNING)))
            .values(state=JobState.CANCELLED, error="cancelled by `farm cancel`",
                    finished_at=func.now())
            .returning(Job.id)).all()
    # No revoke: a running job stops at its next lease renewal, and a waiting message finds
    # its job cancelled and is dropped (revoking asks every worker for a result backend).
    return len(rows)


@dataclass(frozen=True)
class Ended:
    """How a job the fleet ran ended."""

    state: str
    failure_class: str | None
    error: str | None
    build_seconds: float | None


ENDED = (JobState.DONE, JobState.FAILED, JobState.CANCELLED)


def wait_ended(engine: Engine, job_key: str, say: Callable[[str], None],
               poll: float = 2.0) -> Ended:
    """Wait until the fleet has ended the job with this key (its latest row), saying each
    state it passes through and which worker holds it. Nothing here changes the job: a
    caller stopped while waiting (or by a database outage) leaves it to the workers."""
    query = (select(Job.state, Job.lease_owner, Job.failure_class, Job.error,
                    Job.build_seconds)
             .where(Job.job_key == job_key).order_by(Job.id.desc()).limit(1))
    said = None
    while True:
        with engine.connect() as connection:
            state, owner, failure_class, error, build_seconds = connection.execute(query).one()
        now = f"{state} on {owner}" if state == JobState.RUNNING else state
        if now != said:
            say(f"job {job_key[:12]}: {now}")
            said = now
        if state in ENDED:
            return Ended(state, failure_class, error, build_seconds)
        time.sleep(poll)
