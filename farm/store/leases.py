"""Job ownership on the database clock: claim, renew, guarded writes, reaping.

The broker only delivers; these conditional updates decide who runs a job. Every write a
worker makes names the attempt and owner it holds, so a worker whose lease was taken over
changes nothing. Times come from PostgreSQL's ``now()``, never from a worker's clock.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Engine, and_, case, exists, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from farm.store.models import Job, JobState, Worker

CLAIMABLE = (JobState.QUEUED, JobState.LOST)


def beat_seconds(lease_seconds: float) -> float:
    """How often a worker beats and renews its leases: every third of a lease, so that a
    lease outlives two late or failed renewals."""
    return lease_seconds / 3


class LeaseLost(Exception):
    """This worker no longer holds the job (expired, taken over, or cancelled)."""


@dataclass(frozen=True)
class Lease:
    """A worker's hold on one attempt at a job; every guarded write is conditioned on it."""

    job_id: int
    owner: str
    attempt: int

    def holds(self) -> ColumnElement[bool]:
        """SQL condition: the job is still running under exactly this lease."""
        return and_(Job.id == self.job_id, Job.lease_owner == self.owner,
                    Job.attempt == self.attempt, Job.state == JobState.RUNNING)


def _expiry(seconds: int) -> ColumnElement[datetime]:
    return func.now() + timedelta(seconds=seconds)


def _due() -> ColumnElement[bool]:
    return or_(Job.due_at.is_(None), Job.due_at <= func.now())


def claim(engine: Engine, job_id: int, owner: str, seconds: int) -> Lease | None:
    """Take a queued or lost job that is due, or None if it is running elsewhere, done,
    waiting out a retry's backoff or over its limit."""
    with Session(engine) as session, session.begin():
        attempt = session.scalar(
            update(Job)
            .where(Job.id == job_id, Job.state.in_(CLAIMABLE), Job.attempt < Job.max_attempts,
                   _due(), Job.refusals[owner].as_string().is_(None))
            .values(state=JobState.RUNNING, lease_owner=owner, lease_expires_at=_expiry(seconds),
                    attempt=Job.attempt + 1, started_at=func.now(), error=None, due_at=None)
            .returning(Job.attempt))
    return Lease(job_id, owner, attempt) if attempt is not None else None


def renew(engine: Engine, lease: Lease, seconds: int) -> None:
    """Move the lease's expiry ``seconds`` past now; LeaseLost if it no longer holds."""
    with Session(engine) as session, session.begin():
        result = session.execute(update(Job).where(lease.holds())
                                 .values(lease_expires_at=_expiry(seconds)))
        if result.rowcount != 1:  # type: ignore[attr-defined]
            raise LeaseLost(f"job {lease.job_id}: attempt {lease.attempt} no longer "
                            f"held by {lease.owner}")


def finish(engine: Engine, lease: Lease, state: str, error: str | None = None,
           failure_class: str | None = None, summary: dict[str, Any] | None = None) -> bool:
    """End the attempt, done or failed, with the job's summary in the same guarded write;
    False if the lease is no longer held."""
    values: dict[str, Any] = {"state": state, "error": error, "failure_class": failure_class,
                              "finished_at": func.now(), **(summary or {})}
    return _update_held(engine, lease, values)


def retry_later(engine: Engine, lease: Lease, seconds: int, error: str,
                failure_class: str) -> bool:
    """Queue the job again, due after a backoff; the reconciler posts it when due."""
    return _update_held(engine, lease, {
        "state": JobState.QUEUED, "error": error, "failure_class": failure_class,
        "due_at": _expiry(seconds), "posted_at": None})


# How long a job waits after each deferral (an outage that may pass); once it has been
# deferred this many times, the worker refuses it instead (its reason kept).
DEFER_WAITS = (30, 60, 120, 240, 480, 600, 600, 600)


def defer(engine: Engine, lease: Lease, reason: str,
          waits: tuple[int, ...] = DEFER_WAITS) -> int | None:
    """Hand the job back to wait out an outage that may pass: queued again, due after the
    next of ``waits``, the attempt not counted and no refusal noted. Returns that wait, 0
    when the job was deferred ``len(waits)`` times already (nothing changed: refuse it),
    None if the lease no longer holds."""
    with Session(engine) as session, session.begin():
        job = session.scalar(select(Job).where(lease.holds()).with_for_update())
        if job is None:
            return None
        if job.deferrals >= len(waits):
            return 0
        wait = waits[job.deferrals]
        session.execute(update(Job).where(Job.id == job.id).values(
            state=JobState.QUEUED, attempt=Job.attempt - 1, deferrals=Job.deferrals + 1,
            due_at=_expiry(wait), posted_at=None, lease_expires_at=None,
            error=f"waiting {wait} s for an outage to pass: {reason}"))
    return wait


def hand_back(engine: Engine, lease: Lease, reason: str) -> bool:
    """Give the job up unfinished (the worker is stopping): queued again at once, to be
    posted by the next reconciliation, and the attempt not counted."""
    return _update_held(engine, lease, {
        "state": JobState.QUEUED, "error": reason, "attempt": Job.attempt - 1, "posted_at": None,
        "lease_expires_at": None})


@dataclass(frozen=True)
class Refused:
    """What a refusal did: the job handed back for another worker, or ``failed`` because
    every live worker of its class refused it (``reasons``: worker -> why)."""

    failed: bool
    reasons: dict[str, str]


def refuse(engine: Engine, lease: Lease, reason: str, live: set[str],
           failure_class: str = "build_unavailable") -> Refused | None:
    """This worker cannot make the job's build or get its model: note why, so that it
    never claims the job again, and hand it back; once every worker in ``live`` (the
    class's live workers) has refused it, fail it with their reasons (as
    ``failure_class``, the last refusal's). None if the lease no longer holds."""
    with Session(engine) as session, session.begin():
        job = session.scalar(select(Job).where(lease.holds()).with_for_update())
        if job is None:
            return None
        reasons = {**(job.refusals or {}), lease.owner: reason}
        failed = live <= set(reasons)
        text = "; ".join(f"{worker}: {why}" for worker, why in sorted(reasons.items()))
        values: dict[str, Any] = {"refusals": reasons}
        if failed:
            values |= {"state": JobState.FAILED, "finished_at": func.now(),
                       "failure_class": failure_class, "lease_expires_at": None,
                       "error": f"every live worker of class {job.gpu_class} refused it: {text}"}
        else:
            values |= {"state": JobState.QUEUED, "attempt": Job.attempt - 1, "posted_at": None,
                       "lease_expires_at": None, "error": f"handed back: {text}"}
        session.execute(update(Job).where(Job.id == job.id).values(**values))
    return Refused(failed, reasons)


def _update_held(engine: Engine, lease: Lease, values: dict[str, Any]) -> bool:
    with Session(engine) as session, session.begin():
        result = session.execute(update(Job).where(lease.holds()).values(**values))
        return bool(result.rowcount == 1)  # type: ignore[attr-defined]


@contextmanager
def holding(engine: Engine, lease: Lease) -> Iterator[Session]:
    """A transaction that writes only while the lease holds: the job row is locked and
    checked first, so a reaper cannot take the job over between the check and the write."""
    with Session(engine) as session, session.begin():
        held = session.scalar(select(Job.id).where(lease.holds()).with_for_update())
        if held is None:
            raise LeaseLost(f"job {lease.job_id}: attempt {lease.attempt} lost its lease; "
                            "nothing written")
        yield session


@dataclass(frozen=True)
class Reaped:
    """A job whose lease expired: lost, to be posted again, or ``failed`` past its attempts."""

    job_id: int
    gpu_class: str
    failed: bool


# A worker whose heartbeat is this many beats overdue, while another worker of its host beat
# within one, is gone (docs/deployment.md, "Visibility timeout and leases").
GONE_AFTER_BEATS = 2


def _owner_gone(beat: float) -> ColumnElement[bool]:
    """SQL condition: the job's lease owner missed ``GONE_AFTER_BEATS`` heartbeats of
    ``beat`` seconds (or said it stopped) while another worker of its host beat within
    one. The host reaches the database, so the owner's silence is its process gone, not
    its network: its job need not wait out the lease."""
    owner, sibling = aliased(Worker), aliased(Worker)
    sibling_beats = exists().where(
        sibling.host == owner.host, sibling.name != owner.name, sibling.stopped_at.is_(None),
        sibling.heartbeat_at > func.now() - timedelta(seconds=beat))
    return exists().where(
        owner.name == Job.lease_owner, sibling_beats,
        or_(owner.stopped_at.is_not(None),
            owner.heartbeat_at < func.now() - timedelta(seconds=GONE_AFTER_BEATS * beat)))


def reap_expired(engine: Engine, beat: float | None = None) -> list[Reaped]:
    """Mark running jobs whose lease expired as lost (to be posted by the reconciliation,
    in the same transaction: marking and posting cannot diverge), or failed past their
    attempts. With ``beat`` (the heartbeat interval, seconds), also the jobs of owners
    known to be gone (``_owner_gone``), before their leases expire: the new attempt's claim
    makes every write of the old one fail, as an expiry does."""
    expired = Job.lease_expires_at < func.now()
    owner = func.coalesce(Job.lease_owner, "?")
    why: ColumnElement[str] = ("lease of " + owner
                               + " expired: the worker stopped heartbeating")
    taken = expired
    if beat:
        taken = or_(expired, _owner_gone(beat))
        why = case((expired, why), else_=owner + " stopped heartbeating while its host's "
                   "other workers beat: its job taken before its lease expired")
    with Session(engine) as session, session.begin():
        rows = session.execute(
            update(Job)
            .where(Job.state == JobState.RUNNING, taken)
            .values(state=JobState.LOST, posted_at=None, error=why)
            .returning(Job.id, Job.gpu_class, Job.attempt, Job.max_attempts)).all()
        reaped = []
        for job_id, gpu_class, attempt, max_attempts in rows:
            failed = attempt >= max_attempts
            if failed:
                session.execute(update(Job).where(Job.id == job_id).values(
                    state=JobState.FAILED, finished_at=func.now(),
                    error=f"lost its worker in each of {attempt} attempts; giving up"))
            reaped.append(Reaped(job_id, gpu_class, failed))
    return reaped
