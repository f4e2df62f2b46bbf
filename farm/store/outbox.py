"""The job table as the broker's outbox: which jobs still need a message.

A job is *pending* while it is queued or lost, has attempts left and is due. A pending job
with no ``posted_at`` (new, handed back, reaped, or a retry that became due) has no message
yet; one posted longer ago than the repost bound may have lost its message and is checked
against the broker by ``farm.fleet.reconcile``. Rows are taken ``FOR UPDATE SKIP LOCKED``,
so reconcilers running at once (every worker's heartbeat, ``farm submit``) take disjoint
jobs and never post one twice.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import (
    ARRAY,
    ColumnElement,
    Integer,
    String,
    and_,
    any_,
    bindparam,
    cast,
    func,
    literal,
    or_,
    select,
    update,
)
from sqlalchemy.orm import Session

from farm.store.models import Campaign, Job, JobState

PENDING = (JobState.QUEUED, JobState.LOST)
_TASK_ID = re.compile(r"job-(\d+)-\d+")


@dataclass(frozen=True)
class Pending:
    """A pending job taken for posting, with what its message needs."""

    job_id: int
    gpu_class: str
    label: str  # shown by Flower: "campaign model variant [class]"
    posted: bool  # a message was posted before (it may still be in the broker)
    refused_by: frozenset[str]  # the workers that refused it (they never claim it)


@dataclass(frozen=True)
class Message:
    """A message to send for a job to ``queue`` (its class's, or one worker's); its task id
    ``job-<id>-<post_gen>`` is new at every post."""

    job_id: int
    task_id: str
    queue: str
    label: str


def job_of_task(task_id: str) -> int | None:
    """The job a message belongs to, from its task id ``job-<id>-<post_gen>``."""
    match = _TASK_ID.fullmatch(task_id)
    return int(match.group(1)) if match else None


def needs_post(repost_after: int) -> ColumnElement[bool]:
    """SQL condition: pending, due, and never posted or posted over ``repost_after`` s ago."""
    return and_(Job.state.in_(PENDING), Job.attempt < Job.max_attempts,
                or_(Job.due_at.is_(None), Job.due_at <= func.now()),
                or_(Job.posted_at.is_(None),
                    Job.posted_at < func.now() - timedelta(seconds=repost_after)))


def take(session: Session, repost_after: int, campaign_id: int | None = None, *,
         after: int = 0, limit: int | None = None) -> list[Pending]:
    """Lock and return the jobs that :func:`needs_post`, by id: past ``after``, at most
    ``limit`` of them."""
    query = (select(Job.id, Job.gpu_class, Job.model_name, Job.variant_name, Job.posted_at,
                    Job.refusals, Campaign.name)
             .join(Campaign)
             .where(needs_post(repost_after), Job.id > after)
             .order_by(Job.id)
             .limit(limit)
             .with_for_update(of=Job, skip_locked=True))
    if campaign_id is not None:
        query = query.where(Job.campaign_id == campaign_id)
    return [Pending(job_id, gpu_class, f"{campaign} {model} {variant} [{gpu_class}]",
                    posted_at is not None, frozenset(refusals or ()))
            for job_id, gpu_class, model, variant, posted_at, refusals, campaign
            in session.execute(query)]


def _among(job_ids: list[int]) -> ColumnElement[bool]:
    # One PostgreSQL array parameter (the fleet's store): an IN list of 10,000 parameters
    # costs a quarter of a second to build and parse.
    return Job.id == any_(bindparam("job_ids", job_ids, type_=ARRAY(Integer)))


def confirm(session: Session, job_ids: list[int]) -> None:
    """Their messages were seen waiting in the broker: check again after another bound."""
    if job_ids:
        session.execute(update(Job).where(_among(job_ids)).values(posted_at=func.now()))


def mark_posted(session: Session, pending: list[Pending], queues: dict[int, str]
                ) -> list[Message]:
    """Give each job a new message id (its next post generation) before it is sent to its
    queue in ``queues`` (job id -> queue)."""
    if not pending:
        return []
    by_id = {item.job_id: item for item in pending}
    task_id = (literal("job-", String) + cast(Job.id, String) + literal("-", String)
               + cast(Job.post_gen + 1, String))
    rows = session.execute(
        update(Job).where(_among(list(by_id)))
        .values(post_gen=Job.post_gen + 1, task_id=task_id, posted_at=func.now())
        .returning(Job.id, Job.task_id)).all()
    return [Message(job_id, str(task), queues[job_id], by_id[job_id].label)
            for job_id, task in rows]
