"""The Celery task: claim a job in the database, run it under a lease, finish it.

The task is registered with ``shared_task`` so it binds to whichever farm Celery app the
process created (``farm worker``); the coordinator posts it by name.
"""

from __future__ import annotations

import threading
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType

from celery import shared_task
from celery.exceptions import SoftTimeLimitExceeded
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.errors import FarmError
from farm.fleet.app import TASK_NAME
from farm.matrix.spec import JobSpec
from farm.settings import Settings
from farm.store import leases
from farm.store.db import make_engine
from farm.store.models import Job
from farm.store.repo import DbRunSink, run_row, sample_rows, summarize
from workers.checks import Preflight
from workers.config import WorkerConfig
from workers.executor import RunResult, Slot, execute_job
from workers.failures import RETRYABLE, classify
from workers.node import resolve
from workers.telemetry import GpuInfo, Sample


@dataclass
class Node:
    """This worker process's settings and config; set by ``farm worker`` before forking."""

    settings: Settings
    config: WorkerConfig
    gpus: list[GpuInfo]
    _engine: Engine | None = None
    _engine_pid: int = 0

    def engine(self) -> Engine:
        import os

        # Pool children are forked: each process needs its own connection pool.
        if self._engine is None or self._engine_pid != os.getpid():
            self._engine, self._engine_pid = make_engine(self.settings.database_url), os.getpid()
        return self._engine


NODE: Node | None = None


def current_node() -> Node:
    if NODE is None:
        raise RuntimeError("workers.tasks.NODE is unset: start workers with `farm worker`")
    return NODE


class LeaseKeeper:
    """Renews a job's lease every third of its length in a thread, until stopped."""

    def __init__(self, engine: Engine, lease: leases.Lease, seconds: int) -> None:
        self.engine, self.lease, self.seconds = engine, lease, seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.seconds / 3):
            try:
                leases.renew(self.engine, self.lease, self.seconds)
            except leases.LeaseLost:
                self.lost.set()
                return

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


class LeasedRunSink(DbRunSink):
    """Runs written only while this worker's lease on the job holds."""

    def __init__(self, engine: Engine, lease: leases.Lease, keeper: LeaseKeeper,
                 worker_name: str) -> None:
        super().__init__(engine, lease.job_id)
        self.lease, self.keeper, self.worker_name = lease, keeper, worker_name

    def _holding(self) -> AbstractContextManager[Session]:
        if self.keeper.lost.is_set():
            raise leases.LeaseLost(f"job {self.lease.job_id}: lease lost; stopping")
        return leases.holding(self.engine, self.lease)

    def start(self, checked: Preflight) -> None:
        with self._holding() as session:
            self._write_start(session, checked)

    def record(self, result: RunResult, checked: Preflight) -> None:
        with self._holding() as session:
            session.add(run_row(self.job_id, result, checked, self.host, self.worker_name,
                                self.lease.attempt))

    def record_samples(self, slot: Slot, samples: list[Sample]) -> None:
        with self._holding() as session:
            session.add_all(sample_rows(self.job_id, self.lease.attempt, slot, samples))


def _load_spec(engine: Engine, job_id: int) -> tuple[JobSpec, int]:
    with Session(engine) as session:
        job = session.get_one(Job, job_id)
        return JobSpec.model_validate(job.spec), job.max_attempts


@shared_task(name=TASK_NAME, bind=True, acks_late=True)
def execute_job_task(self: object, job_id: int) -> str:
    """Run job ``job_id`` if this worker can claim it; the return value says what happened."""
    node = current_node()
    engine, seconds = node.engine(), node.settings.lease_seconds
    lease = leases.claim(engine, job_id, node.config.worker_name, seconds)
    if lease is None:
        return f"job {job_id}: not claimable (running elsewhere, finished or out of attempts)"
    spec, max_attempts = _load_spec(engine, job_id)
    try:
        with LeaseKeeper(engine, lease, seconds) as keeper:
            sink = LeasedRunSink(engine, lease, keeper, node.config.worker_name)
            outcome = execute_job(resolve(spec, node.config), sink,
                                  logs_dir=node.settings.logs_dir, gpus=node.gpus)
    except leases.LeaseLost as exc:
        return f"job {job_id}: {exc}"
    except SoftTimeLimitExceeded:
        leases.finish(engine, lease, "failed", "the job ran past the worker's time limit",
                      "timeout")
        return f"job {job_id}: failed: time limit"
    except FarmError as exc:
        return _retry_or_fail(engine, lease, max_attempts, exc)
    summarize(engine, job_id, outcome)
    leases.finish(engine, lease, "done")
    return f"job {job_id}: done (attempt {lease.attempt})"


def _retry_or_fail(engine: Engine, lease: leases.Lease, max_attempts: int,
                   exc: FarmError) -> str:
    """Failures that can pass (timeouts, crashes, dropped requests) are posted again with
    backoff until the attempts run out; the others fail at once with their class."""
    from farm.fleet.submit import post_jobs

    failure = classify(exc)
    if failure not in RETRYABLE or lease.attempt >= max_attempts:
        leases.finish(engine, lease, "failed", f"attempt {lease.attempt}: {exc}", failure)
        return f"job {lease.job_id}: failed ({failure}) on attempt {lease.attempt}: {exc}"
    if leases.finish(engine, lease, "queued", f"attempt {lease.attempt} failed, retrying: {exc}",
                     failure):
        post_jobs(engine, [lease.job_id], countdown=min(300, 10 * 2 ** lease.attempt))
    return f"job {lease.job_id}: attempt {lease.attempt} failed ({failure}), posted again"
