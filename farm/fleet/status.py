"""``farm status`` and ``farm workers``: the campaign and the fleet, read from the database."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, load_only

from farm.errors import ConfigError
from farm.store.campaigns import latest_campaign
from farm.store.models import Campaign, Job, JobState, Run
from farm.store.outbox import PENDING, needs_post
from farm.store.registry import all_workers

STATES: tuple[str, ...] = tuple(JobState)


@dataclass
class CampaignStatus:
    """One campaign's progress for ``farm status``: jobs by state, running, failed, ETA."""

    campaign: str
    counts: dict[str, int]
    running: list[tuple[str, str, str, int, int]] = field(default_factory=list)
    failures: list[tuple[str, str, str]] = field(default_factory=list)
    # Pending jobs some workers could not make the build of: job, variant, who and why.
    refused: list[tuple[str, str, str]] = field(default_factory=list)
    eta_seconds: float | None = None
    # Pending jobs with no message in the broker, or none seen within the repost bound.
    unposted: int = 0


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def _can_run(job: Job) -> bool:
    """Running, or pending with an attempt left: a job that will still take worker time."""
    pending = job.state in PENDING and job.attempt < job.max_attempts
    return job.state == JobState.RUNNING or pending


def _unposted(session: Session, campaign_id: int, repost_after: int) -> int:
    """Jobs that reconciliation will post again (or look up in the broker first)."""
    query = (select(func.count()).select_from(Job)
             .where(Job.campaign_id == campaign_id, needs_post(repost_after)))
    return session.scalar(query) or 0


def campaign_status(engine: Engine, campaign: str | None,
                    repost_after: int | None) -> CampaignStatus:
    """The campaign's jobs by state; with ``repost_after`` (a fleet: jobs go through the
    broker) also how many wait for reconciliation to post them again."""
    name = campaign or latest_campaign(engine)
    with Session(engine) as session:
        campaign_id = session.scalar(select(Campaign.id).where(Campaign.name == name))
        if campaign_id is None:
            raise ConfigError(f"no campaign named {name!r}")
        # Not the spec JSON: a 10,000-job campaign would parse 20 MB to count states.
        columns = load_only(Job.job_key, Job.variant_name, Job.state, Job.lease_owner,
                            Job.attempt, Job.max_attempts, Job.error, Job.failure_class,
                            Job.started_at, Job.finished_at, Job.refusals)
        jobs = list(session.scalars(select(Job).options(columns)
                                    .where(Job.campaign_id == campaign_id)
                                    .order_by(Job.id)))
        runs = dict(session.execute(select(Run.job_id, func.count()).join(Job)
                                    .where(Job.campaign_id == campaign_id)
                                    .group_by(Run.job_id)).all())
        unposted = _unposted(session, campaign_id, repost_after) if repost_after else 0
    counts = {state: sum(job.state == state for job in jobs) for state in STATES}
    status = CampaignStatus(campaign=name, counts=counts, unposted=unposted)
    for job in jobs:
        if job.state == JobState.RUNNING:
            status.running.append((job.job_key[:10], job.variant_name, job.lease_owner or "?",
                                   job.attempt, runs.get(job.id, 0)))
        elif job.state in PENDING and job.refusals:
            status.refused.append((job.job_key[:10], job.variant_name, "; ".join(
                f"{worker}: {why}" for worker, why in sorted(job.refusals.items()))))
        elif job.state == JobState.FAILED:
            reason = f"[{job.failure_class}] " if job.failure_class else ""
            status.failures.append((job.job_key[:10], job.variant_name, reason + (job.error or "")))
    durations = [(_aware(job.finished_at) - _aware(job.started_at)).total_seconds()
                 for job in jobs
                 if job.state == JobState.DONE and job.started_at and job.finished_at]
    left = sum(map(_can_run, jobs))
    if durations and left:
        owners = {job.lease_owner for job in jobs if job.state == JobState.RUNNING} or {None}
        status.eta_seconds = statistics.median(durations) * left / len(owners)
    return status


def worker_rows(engine: Engine, live_within: float) -> list[tuple[object, ...]]:
    """Every registered worker as a row: name, class, host, devices, builds, models (a
    count), its state (live, stopped, or dead: silent over ``live_within`` s) and how long
    ago it beat."""
    rows: list[tuple[object, ...]] = []
    for worker, age in all_workers(engine):
        alive = worker.stopped_at is None and age <= live_within
        state = "live" if alive else ("stopped" if worker.stopped_at else "dead")
        rows.append((worker.name, worker.gpu_class, worker.host,
                     ",".join(map(str, worker.devices)) or "cpu", ", ".join(worker.builds),
                     len(worker.models), state, f"{age:.0f} s ago"))
    return rows
