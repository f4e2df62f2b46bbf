"""``farm status`` and ``farm workers``: the campaign and the fleet, read from the database."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session, load_only

from farm.errors import ConfigError
from farm.store.campaigns import latest_campaign
from farm.store.leases import GONE_AFTER_BEATS
from farm.store.models import Campaign, Job, JobState, Run, Worker
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
    # Running jobs whose owner's heartbeat is overdue: job, variant, owner, seconds since
    # its last heartbeat (None: no worker of that name registered), and when a live worker
    # re-posts the job at the latest (UTC).
    waiting: list[tuple[str, str, str, float | None, datetime]] = field(default_factory=list)


@dataclass(frozen=True)
class Owner:
    """What the database knows of a running job's owner, on its own clock: seconds since
    the owner's last heartbeat (None: no such worker) and until the job's lease expires."""

    silent: float | None
    lease_left: float


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


def _owners(session: Session, campaign_id: int) -> dict[int, Owner]:
    """The owners of the campaign's running jobs, as of the database's now."""
    now = func.now()
    query = (select(Job.id, func.extract("epoch", now - Worker.heartbeat_at),
                    func.extract("epoch", Job.lease_expires_at - now))
             .outerjoin(Worker, Worker.name == Job.lease_owner)
             .where(Job.campaign_id == campaign_id, Job.state == JobState.RUNNING,
                    Job.lease_expires_at.is_not(None)))
    return {job_id: Owner(None if silent is None else float(silent), float(left))
            for job_id, silent, left in session.execute(query)}


def overdue(silent: float | None, beat: float) -> bool:
    """Whether a worker silent this long (None: never registered) missed its heartbeats:
    ``GONE_AFTER_BEATS`` of them, as the reaper counts (``farm.store.leases``)."""
    return silent is None or silent > GONE_AFTER_BEATS * beat


def campaign_status(engine: Engine, campaign: str | None, repost_after: int | None,
                    beat: float | None = None) -> CampaignStatus:
    """The campaign's jobs by state; with ``repost_after`` (a fleet: jobs go through the
    broker) also how many wait for reconciliation to post them again; with ``beat`` (the
    fleet's heartbeat interval) the running jobs whose owner is overdue, as waiting for
    its lease to run out."""
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
        owners = _owners(session, campaign_id) if beat else {}
        now = datetime.now(UTC)
    counts = {state: sum(job.state == state for job in jobs) for state in STATES}
    status = CampaignStatus(campaign=name, counts=counts, unposted=unposted)
    for job in jobs:
        owner = owners.get(job.id)
        if beat and owner and overdue(owner.silent, beat):
            # A live worker's beat reaps it at most one beat after its lease runs out.
            repost = now + timedelta(seconds=max(owner.lease_left, 0) + beat)
            status.waiting.append((job.job_key[:10], job.variant_name, job.lease_owner or "?",
                                   owner.silent, repost))
        elif job.state == JobState.RUNNING:
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
        # Jobs run one at a time per worker holding one, waiting owners not counted.
        busy = {worker for _, _, worker, *_ in status.running}
        status.eta_seconds = statistics.median(durations) * left / max(len(busy), 1)
        if status.waiting:  # not before the waiting jobs are re-posted and run again
            latest = max(repost for *_, repost in status.waiting)
            status.eta_seconds = max(status.eta_seconds, (latest - now).total_seconds()
                                     + statistics.median(durations))
    return status


def worker_rows(engine: Engine, beat: float, lease_seconds: float) -> list[tuple[object, ...]]:
    """Every registered worker as a row: name, class, host, devices, builds, models (a
    count), its state and how long ago it beat. The state: live; not heard from (its
    heartbeats, one every ``beat`` s, overdue: ``overdue``); dead (silent over a lease, its
    jobs reaped); or stopped (it said so)."""
    rows: list[tuple[object, ...]] = []
    for worker, age in all_workers(engine):
        state = ("stopped" if worker.stopped_at else "dead" if age > lease_seconds
                 else "not heard from" if overdue(age, beat) else "live")
        rows.append((worker.name, worker.gpu_class, worker.host,
                     ",".join(map(str, worker.devices)) or "cpu", ", ".join(worker.builds),
                     len(worker.models), state, f"{age:.0f} s ago"))
    return rows
