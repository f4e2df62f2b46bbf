"""Campaigns, jobs (idempotent by job_key) and models in the store.

Runs are written by the sinks in ``workers.job.sinks``, beside the executor that makes them."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Engine, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from farm.matrix.spec import JobSpec
from farm.store.models import Campaign, Job, JobState, Model

if TYPE_CHECKING:
    import psycopg


def ensure_campaign(session: Session, name: str, matrix_path: str) -> Campaign:
    """The campaign named ``name``, created (and flushed, so it has an id) if new."""
    campaign = session.scalar(select(Campaign).where(Campaign.name == name))
    if campaign is None:
        campaign = Campaign(name=name, matrix_path=matrix_path)
        session.add(campaign)
        session.flush()
    return campaign


def ensure_jobs(session: Session, campaign: Campaign, specs: Sequence[JobSpec],
                max_attempts: int = 3) -> dict[str, int]:
    """The ids of the campaign's jobs by ``job_key``, inserting those not stored yet."""
    keys = select(Job.job_key, Job.id).where(Job.campaign_id == campaign.id)
    existing = {key: job_id for key, job_id in session.execute(keys)}
    new = [spec for spec in specs if spec.job_key not in existing]
    if new:
        _insert_jobs(session, [_job_row(campaign.id, spec, max_attempts) for spec in new])
        existing = {key: job_id for key, job_id in session.execute(keys)}
    return existing


_JOB_COLUMNS = ("campaign_id", "job_key", "comparable_key", "model_name", "build_name",
                "variant_name", "gpu_class", "state", "attempt", "max_attempts", "varying", "spec")


def _job_row(campaign_id: int, spec: JobSpec, max_attempts: int) -> tuple[Any, ...]:
    """A new job's values in ``_JOB_COLUMNS`` order, its JSON columns already as text:
    pydantic writes a spec's JSON several times faster than ``json.dumps`` of its dump."""
    return (campaign_id, spec.job_key, spec.comparable_key, spec.model.name, spec.build.name,
            spec.variant.name, spec.gpu_class, JobState.QUEUED.value, 0, max_attempts,
            json.dumps(spec.varying), spec.model_dump_json())


def _insert_jobs(session: Session, rows: list[tuple[Any, ...]]) -> None:
    """Insert job rows: by COPY on PostgreSQL (a 10,000-job matrix in a fraction of the
    time of an INSERT per row), in one executemany on SQLite."""
    connection = session.connection()
    columns = ", ".join(_JOB_COLUMNS)
    if connection.dialect.name == "postgresql":
        driver = cast("psycopg.Connection[Any]", connection.connection.driver_connection)
        with (driver.cursor() as cursor,
              cursor.copy(f"COPY {Job.__tablename__} ({columns}) FROM STDIN") as copy):
            for row in rows:
                copy.write_row(row)
    else:
        marks = ", ".join("?" * len(_JOB_COLUMNS))
        connection.exec_driver_sql(
            f"INSERT INTO {Job.__tablename__} ({columns}) VALUES ({marks})", rows)


def register(engine: Engine, campaign_name: str, matrix_path: str,
             specs: Sequence[JobSpec], max_attempts: int = 3) -> list[int]:
    """Store the campaign and its jobs in one transaction; return the job ids in order."""
    with Session(engine) as session, session.begin():
        campaign = ensure_campaign(session, campaign_name, matrix_path)
        ids = ensure_jobs(session, campaign, specs, max_attempts)
        return [ids[spec.job_key] for spec in specs]


def job_state(engine: Engine, job_id: int) -> str:
    """The job's current state."""
    with Session(engine) as session:
        return session.get_one(Job, job_id).state


def mark_running(engine: Engine, job_id: int) -> None:
    """Start the job's next attempt (``farm run``: one owner, no lease)."""
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == job_id).values(
            state=JobState.RUNNING, attempt=Job.attempt + 1, error=None,
            started_at=datetime.now(UTC)))


def mark_finished(engine: Engine, job_id: int, state: str, error: str | None = None,
                  failure_class: str | None = None,
                  summary: dict[str, Any] | None = None) -> None:
    """End an attempt of ``farm run`` in ``state``; only done and failed jobs get a finish time."""
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == job_id).values(
            state=state, error=error, failure_class=failure_class,
            finished_at=datetime.now(UTC) if state in (JobState.DONE, JobState.FAILED) else None,
            **(summary or {})))


def ensure_model(session: Session, values: dict[str, Any]) -> None:
    """Insert a model row unless one with that sha256 exists (both dialects)."""
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(insert(Model).values(**values).on_conflict_do_nothing())



def stored_states(engine: Engine, job_keys: Sequence[str]) -> dict[str, str]:
    """The state of each of these jobs the store holds, by job key (``farm track``: a
    commit whose jobs are all stored is tracked)."""
    with engine.connect() as connection:
        rows = connection.execute(select(Job.job_key, Job.state)
                                  .where(Job.job_key.in_(list(job_keys))))
        return {str(key): str(state) for key, state in rows}
