"""``farm submit`` and ``farm cancel``: campaigns into PostgreSQL, jobs onto Celery queues."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

from celery import Celery, current_app
from kombu.exceptions import OperationalError
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from farm.errors import ConfigError, RuntimeFarmError
from farm.fleet.app import TASK_NAME, queue_name
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.settings import Settings
from farm.store import repo
from farm.store.db import require_current_schema
from farm.store.models import Campaign, Job, Worker
from farm.store.registry import live_workers


def require_fleet(settings: Settings) -> None:
    if settings.embedded:
        raise ConfigError("the fleet needs one shared PostgreSQL: set FARM_DATABASE_URL="
                          "postgresql://USER:PASSWORD@HOST/DB (on one machine, use `farm run`)")


def post_jobs(engine: Engine, job_ids: list[int], *, app: Celery | None = None,
              countdown: float | None = None) -> None:
    """Send jobs to their class's queues over one broker connection, named for Flower.

    Task ids are written first: a job whose message is lost in a failed send keeps no
    ``posted_at``, so the next submit posts it again.
    """
    if not job_ids:
        return
    app = app or current_app
    query = (select(Job.id, Job.gpu_class, Job.model_name, Job.variant_name, Campaign.name)
             .join(Campaign).where(Job.id.in_(job_ids)))
    with Session(engine) as session:
        rows = session.execute(query).all()
    messages = [(job_id, str(uuid.uuid4()), gpu_class, f"{campaign} {model} {variant} "
                 f"[{gpu_class}]") for job_id, gpu_class, model, variant, campaign in rows]
    _send(app, messages, countdown)
    with Session(engine) as session, session.begin():
        session.execute(update(Job), [{"id": job_id, "task_id": task_id}
                                      for job_id, task_id, _, _ in messages])
        session.execute(update(Job).where(Job.id.in_(job_ids)).values(posted_at=func.now()))


def _send(app: Celery, messages: list[tuple[int, str, str, str]],
          countdown: float | None) -> None:
    try:
        # One Redis pipeline per 1,000 commands instead of two round trips per job (the
        # task and its task-sent event): a 10,000-job campaign posts in seconds.
        with app.producer_or_acquire() as producer, producer.batch(max_size=1000):
            for job_id, task_id, gpu_class, label in messages:
                app.send_task(TASK_NAME, args=[job_id], task_id=task_id,
                              queue=queue_name(gpu_class), argsrepr=label,
                              countdown=countdown, producer=producer)
    except OperationalError as exc:
        raise RuntimeFarmError(f"cannot reach the broker {_broker(app)}: {exc}") from exc


def _broker(app: Celery) -> str:
    return str(app.connection_for_write().as_uri())


def require_broker(app: Celery) -> None:
    """Fail before anything is stored if the broker does not answer."""
    try:
        with app.connection_for_write() as connection:
            connection.ensure_connection(max_retries=1, timeout=5)
    except OperationalError as exc:
        raise RuntimeFarmError(f"cannot reach the broker {_broker(app)}: {exc}") from exc


def _why_unrunnable(spec: JobSpec, workers: list[Worker]) -> str | None:
    """None if some live worker of the job's class has its build and model, else why not."""
    of_class = [w for w in workers if w.gpu_class == spec.gpu_class]
    if not of_class:
        return (f"no live worker of GPU class {spec.gpu_class!r} (start one: farm worker "
                f"--gpu-class {spec.gpu_class})")
    needed = {spec.baseline.build.name, spec.variant.build.name}
    with_build = [w for w in of_class if needed <= set(w.builds)]
    if not with_build:
        return (f"no worker of class {spec.gpu_class!r} has build"
                f"{'s' if len(needed) > 1 else ''} {', '.join(sorted(needed))}")
    wanted = spec.model.path or spec.model.file or f"{spec.model.name}.gguf"
    if not any(wanted in w.models or Path(wanted).name in w.models for w in with_build):
        return (f"no worker of class {spec.gpu_class!r} with build {spec.build.name!r} has "
                f"model file {wanted!r} in its models dir")
    return None


@dataclass
class SubmitResult:
    campaign: str
    jobs: int
    posted: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    already: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    unrunnable: list[tuple[JobSpec, str]] = field(default_factory=list)


def _to_post(job: Job, retry_failed: bool) -> bool:
    if job.state == "failed" and retry_failed:
        job.state, job.attempt, job.error = "queued", 0, None
        return True
    return job.state in ("lost", "cancelled") or (job.state == "queued" and job.posted_at is None)


def submit(path: Path, loaded: tuple[Matrix, list[JobSpec]], settings: Settings, app: Celery,
           engine: Engine, *, retry_failed: bool) -> SubmitResult:
    """Store the campaign's jobs and post those not done to their queues."""
    matrix, specs = loaded
    require_current_schema(engine)
    require_broker(app)
    workers = live_workers(engine, timedelta(seconds=settings.lease_seconds))
    result = SubmitResult(campaign=matrix.campaign, jobs=len(specs))
    runnable = []
    for spec in specs:
        reason = _why_unrunnable(spec, workers)
        if reason:
            result.unrunnable.append((spec, reason))
        else:
            runnable.append(spec)
    with Session(engine) as session, session.begin():
        campaign = repo.ensure_campaign(session, matrix.campaign, str(path.resolve()))
        jobs = repo.ensure_jobs(session, campaign, runnable, settings.max_attempts)
        to_post: list[tuple[int, str]] = []
        for job in jobs:
            if _to_post(job, retry_failed):
                job.state = "queued" if job.state == "cancelled" else job.state
                to_post.append((job.id, job.gpu_class))
            else:
                result.already[job.state] += 1
    post_jobs(engine, [job_id for job_id, _ in to_post], app=app)
    for _, gpu_class in to_post:
        result.posted[queue_name(gpu_class)] += 1
    return result


def cancel(engine: Engine, app: Celery, campaign: str) -> int:
    """Cancel what is queued or running; running jobs stop when their lease renewal fails."""
    with Session(engine) as session, session.begin():
        campaign_id = session.scalar(select(Campaign.id).where(Campaign.name == campaign))
        if campaign_id is None:
            raise ConfigError(f"no campaign named {campaign!r}")
        rows = session.execute(
            update(Job).where(Job.campaign_id == campaign_id,
                              Job.state.in_(("queued", "lost", "running")))
            .values(state="cancelled", error="cancelled by `farm cancel`",
                    finished_at=func.now())
            .returning(Job.task_id)).all()
    task_ids = [task_id for (task_id,) in rows if task_id]
    if task_ids:
        app.control.revoke(task_ids)
    return len(rows)
