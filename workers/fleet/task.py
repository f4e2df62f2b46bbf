"""The Celery task: claim a job in the database, run it under a lease, finish it.

The task is registered with ``shared_task`` so it binds to whichever farm Celery app the
process created (``farm worker``); the coordinator posts it by name. Database and broker
errors are retried; a message is acknowledged only once its job is finished, handed back
or not ours to run; otherwise it goes back to the queue.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from types import FrameType, TracebackType
from typing import TypeVar

from celery import Task, current_app, shared_task
from celery.exceptions import Reject, SoftTimeLimitExceeded
from pydantic import ValidationError
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.errors import (
    RETRYABLE,
    ConfigError,
    FarmError,
    InternalError,
    Unavailable,
    first_line,
)
from farm.fleet.app import TASK_NAME
from farm.fleet.reconcile import reconcile
from farm.matrix.spec import JobSpec
from farm.retry import OUTAGE, TRANSIENT, FailingLog, retrying
from farm.settings import Settings
from farm.store import leases, registry
from farm.store.db import make_engine
from farm.store.models import Job, JobState
from workers.fleet.allocation import Claims
from workers.fleet.config import WorkerConfig
from workers.job.executor import host_name
from workers.job.resolve import resolve
from workers.job.results import Outcome
from workers.job.sinks import LeasedRunSink
from workers.job.telemetry import GpuInfo
from workers.lifecycle import Hold, measure, prepare, summarize
from workers.paths import NodePaths
from workers.setup.hub import HubAccess


@dataclass
class WorkerContext:
    """This worker process's settings, config and GPUs: attached by ``farm worker`` to its
    Celery app (``app.farm_worker``) before the pool forks."""

    settings: Settings
    config: WorkerConfig
    gpus: list[GpuInfo]
    # What bounds this worker's claims (--max-jobs, --deadline); None: nothing does.
    claims: Claims | None = None
    _engine: Engine | None = None
    _engine_pid: int = 0

    def engine(self) -> Engine:
        """This process's database engine."""
        # Pool children are forked: each process needs its own engine. It holds no
        # connection between uses, nor does the heartbeat's (workers.fleet.daemon): a
        # fleet of a hundred workers holds only the connections in use.
        if self._engine is None or self._engine_pid != os.getpid():
            self._engine = make_engine(self.settings.database_url, connections=0)
            self._engine_pid = os.getpid()
        return self._engine


log = logging.getLogger("farm.worker")
T = TypeVar("T")


class WorkerStopping(Exception):
    """SIGTERM reached the process running a job: hand the job back and stop."""


class WorkerTask(Task):  # type: ignore[misc]  # Celery is untyped
    """Base of the job task: it reads the worker `farm worker` attached to its Celery app."""

    @property
    def worker(self) -> WorkerContext:
        """The worker ``farm worker`` attached to the app; a RuntimeError if there is none."""
        worker = getattr(self.app, "farm_worker", None)
        if not isinstance(worker, WorkerContext):
            raise RuntimeError("this Celery app has no farm worker: start workers with "
                               "`farm worker`")
        return worker


class LeaseKeeper:
    """Renews a job's lease every third of its length in a thread, until stopped or lost.

    A database outage does not stop it: it keeps trying, logging once when renewals start
    failing and once when they succeed again; whether the lease survived is the database's
    call when it answers (a reaper may have taken the job meanwhile).
    """

    def __init__(self, engine: Engine, lease: leases.Lease, seconds: int) -> None:
        self.engine, self.lease, self.seconds = engine, lease, seconds
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lease-keeper", daemon=True)

    def _loop(self) -> None:
        trouble = FailingLog(log, f"job {self.lease.job_id}: lease renewal failing, retrying",
                             f"job {self.lease.job_id}: lease renewed again")
        while not self._stop.wait(leases.beat_seconds(self.seconds)):
            try:
                leases.renew(self.engine, self.lease, self.seconds)
            except leases.LeaseLost as exc:
                log.warning("%s", exc)
                self.lost.set()
                return
            except TRANSIENT as exc:
                trouble.failed(exc)
                continue
            trouble.succeeded()

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()


def _load_spec(engine: Engine, job_id: int) -> tuple[JobSpec | ConfigError, int]:
    """The job's spec as stored, validated as a matrix's jobs are; a row that does not
    validate is the job's error (it fails as ``config``), not the worker's."""
    with Session(engine) as session:
        job = session.get_one(Job, job_id)
        try:
            return JobSpec.model_validate(job.spec), job.max_attempts
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc']))}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors()[:5])
            return ConfigError(f"the stored job spec is not valid: {problems}"), job.max_attempts


@contextmanager
def _sigterm_stops_the_job() -> Iterator[None]:
    """While a job runs, SIGTERM (to this process, its group, or forwarded by the worker's
    main process) raises WorkerStopping; a second SIGTERM is ignored until the job has
    been handed back."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(_signum: int, _frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise WorkerStopping("the worker is stopping")

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@shared_task(name=TASK_NAME, bind=True, acks_late=True, base=WorkerTask)
def execute_job_task(self: WorkerTask, job_id: int) -> str:
    """Run job ``job_id`` if this worker can claim it; the return value says what happened."""
    worker = self.worker
    engine, settings = worker.engine(), worker.settings
    patient = _patient(settings.repost_after, job_id)
    claims = worker.claims
    if claims is not None:
        _may_claim(patient(lambda: claims.refusal(engine, job_id, datetime.now(UTC)),
                           "checking its estimate"), job_id)
    lease = patient(lambda: leases.claim(engine, job_id, worker.config.worker_name,
                                         settings.lease_seconds), "claiming")
    if lease is None:
        return (f"job {job_id}: not claimable (running elsewhere, finished, waiting out a "
                "retry or out of attempts)")
    if claims:
        claims.counted()
    spec, max_attempts = patient(lambda: _load_spec(engine, job_id), "reading its spec")
    if isinstance(spec, ConfigError):
        return _retry_or_fail(engine, lease, max_attempts, spec, patient)
    with _sigterm_stops_the_job():
        try:
            return _run(worker, lease, spec, max_attempts)
        except WorkerStopping:
            return _hand_back(engine, lease, settings)


def _may_claim(refusal: str | None, job_id: int) -> None:
    """Hand the message back unclaimed if the worker's allocation refuses the job."""
    if refusal:
        log.warning("job %s: not claimed: %s", job_id, refusal)
        time.sleep(1)  # the worker is stopping (allocation.Watch): no loop on one message
        raise Reject(f"job {job_id}: not claimed; message handed back", requeue=True)


def _patient(within: float, job_id: int) -> Callable[[Callable[[], T], str], T]:
    """Retry a database call through an outage; past ``within`` the message is handed back
    to the queue (never acknowledged for a job nobody finished)."""
    def call(function: Callable[[], T], what: str) -> T:
        try:
            return retrying(function, within=within, what=f"job {job_id}: {what}", log=log)
        except TRANSIENT as exc:
            raise Reject(f"job {job_id}: {what}: {first_line(exc)}; message handed back",
                         requeue=True) from exc
    return call


@contextmanager
def job_clock(seconds: int) -> Iterator[None]:
    """The job's own time limit, started once its builds are made: SoftTimeLimitExceeded
    after ``seconds`` (Celery's limits, which include the build, are only the backstop)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: FrameType | None) -> None:
        raise SoftTimeLimitExceeded("the job's time limit")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class _BuildsFirst:
    """Between a job's blocks, a waiting build of this node goes first, for up to ``limit``
    seconds in all (Settings.task_time_limit allows for it); then other jobs' builds wait
    for this one's end. Another job's build is not this job's time: its clock stops."""

    job_id: int
    limit: float
    waited: float = 0.0

    def between_blocks(self, let_builds_go: Callable[[], float]) -> Callable[[], None]:
        """What runs between blocks, given the measurement's ``let_builds_go``."""
        return partial(self._let_a_build_go, let_builds_go)

    def _let_a_build_go(self, let_builds_go: Callable[[], float]) -> None:
        if self.waited >= self.limit:
            return
        with clock_stopped():
            waited = let_builds_go()
        self.waited += waited
        if waited:
            log.info("job %s: let a build of this node go first (%.0f s)", self.job_id, waited)


def _measure(worker: WorkerContext, lease: leases.Lease, spec: JobSpec,
             keeper: LeaseKeeper) -> tuple[Outcome, float]:
    """The job's lifecycle under the lease (``workers.lifecycle``): admitted, its models
    fetched and builds made (outages tried again, outside the job's time limit), then
    measured within it, the node's builds let go first between blocks for up to a build's
    time limit in all."""
    settings, paths, job_id = worker.settings, NodePaths.of(worker.settings), lease.job_id
    builds_first = _BuildsFirst(job_id, settings.build_time_limit)
    hold = Hold(gpus=worker.gpus, attempt=lambda call: _through_outages(call, job_id),
                clock=lambda: job_clock(settings.job_time_limit),
                between_blocks=builds_first.between_blocks,
                siblings=lambda: _node_pids(worker.engine()),
                say=lambda line: log.info("job %s: %s", job_id, line))
    prepared = prepare(spec, worker.config.files(), paths, HubAccess.of(settings),
                       worker.config.sources, hold)
    if prepared.build_seconds:
        log.info("job %s: builds made in %.0f s", job_id, prepared.build_seconds)
    sink = LeasedRunSink(worker.engine(), lease, keeper.lost, worker.config.worker_name,
                         worker.config.gpu_class, settings.repost_after)
    return measure(resolve(spec, prepared.files), prepared.files, paths, sink,
                   hold), prepared.build_seconds


@contextmanager
def clock_stopped() -> Iterator[None]:
    """The job's clock (``job_clock``) stopped meanwhile, and started again with what it
    had left (nothing to stop outside the main thread)."""
    left, _ = signal.getitimer(signal.ITIMER_REAL)
    if left:
        signal.setitimer(signal.ITIMER_REAL, 0)
    try:
        yield
    finally:
        if left:
            signal.setitimer(signal.ITIMER_REAL, left)


# Within a job, what may pass (farm.errors.Unavailable.transient) is tried again after
# these waits (under the lease); then the job is deferred (leases.defer).
OUTAGE_WAITS = (5, 10, 20)


def _through_outages(call: Callable[[], T], job_id: int) -> T:
    """``call()``, tried again after each of OUTAGE_WAITS while it fails with a transient
    Unavailable (a Hub answering 503, a source that does not answer)."""
    for wait in OUTAGE_WAITS:
        try:
            return call()
        except Unavailable as exc:
            if not exc.transient:
                raise
            log.warning("job %s: %s; trying again in %d s", job_id, first_line(exc), wait)
            time.sleep(wait)
    return call()


def _run(worker: WorkerContext, lease: leases.Lease, spec: JobSpec, max_attempts: int) -> str:
    engine, settings, job_id = worker.engine(), worker.settings, lease.job_id
    patient = _patient(settings.repost_after, job_id)
    try:
        with LeaseKeeper(engine, lease, settings.lease_seconds) as keeper:
            outcome, build_seconds = _measure(worker, lease, spec, keeper)
        summary = patient(lambda: summarize(engine, job_id, outcome, build_seconds),
                          "summarizing")
    except Unavailable as exc:
        return _defer(worker, lease, exc) if exc.transient else _refuse(worker, lease, exc)
    except leases.LeaseLost as exc:
        return f"job {job_id}: {exc}"
    except TRANSIENT as exc:
        # The database stayed away longer than we wait: the lease lapses, a reaper hands the
        # job on, and this message goes back to the queue.
        raise Reject(f"job {job_id}: database unreachable: {first_line(exc)}; message "
                     "handed back", requeue=True) from exc
    except SoftTimeLimitExceeded:
        patient(lambda: leases.finish(engine, lease, JobState.FAILED,
                                      "the job ran past the worker's time limit", "timeout"),
                "finishing")
        return f"job {job_id}: failed: time limit"
    except FarmError as exc:
        return _retry_or_fail(engine, lease, max_attempts, exc, patient)
    except (WorkerStopping, Reject):
        raise
    except Exception as exc:
        # A failure nobody foresaw still ends the attempt with its reason, never a job
        # left running until its lease lapses and then taken again.
        log.exception("job %s: unexpected failure", job_id)
        internal = InternalError(f"unexpected {type(exc).__name__}: {first_line(exc)}; "
                                 "see the worker's log")
        return _retry_or_fail(engine, lease, max_attempts, internal, patient)
    done = patient(lambda: leases.finish(engine, lease, JobState.DONE, summary=summary),
                   "finishing")
    if not done:
        return f"job {job_id}: finished, but its lease was lost; the results stand unsummarized"
    return f"job {job_id}: done (attempt {lease.attempt})"


def _node_pids(engine: Engine) -> list[int]:
    """This node's workers (this one's main process among them), for the executor to tell
    the farm's own work from other work; none when the database does not answer (then the
    sibling workers' servers count as other work, and say so in the runs)."""
    try:
        return registry.node_pids(engine, host_name())
    except OUTAGE as exc:
        log.warning("the node's workers could not be read (%s): their work counts as other "
                    "work", first_line(exc))
        return []


def _hand_back(engine: Engine, lease: leases.Lease, settings: Settings) -> str:
    """Give the job back and post it at once, so another worker need not wait out the
    lease; if the broker is down, reconciliation posts it later."""
    if not leases.hand_back(engine, lease, "handed back: its worker was stopped"):
        return f"job {lease.job_id}: stopping; the lease was already gone"
    _post_now(engine, settings, lease.job_id)
    return f"job {lease.job_id}: handed back (worker stopping)"


def _post_now(engine: Engine, settings: Settings, job_id: int) -> None:
    """Post a handed-back job at once; if the broker is down, reconciliation posts it."""
    try:
        reconcile(engine, current_app, settings.repost_after)
    except OUTAGE as exc:
        log.warning("job %s handed back; posting it failed (%s): reconciliation will",
                    job_id, exc)


def _refuse(worker: WorkerContext, lease: leases.Lease, exc: Unavailable) -> str:
    """This worker cannot make the job's build or get its model: hand it back for another
    worker of the class (and never claim it again); fail it once every live worker of the
    class refused."""
    engine, settings = worker.engine(), worker.settings
    patient = _patient(settings.repost_after, lease.job_id)
    live = {row.name for row in patient(lambda: registry.live_workers(
        engine, timedelta(seconds=settings.lease_seconds)), "listing live workers")
        if row.gpu_class == worker.config.gpu_class} | {lease.owner}
    refused = patient(lambda: leases.refuse(engine, lease, first_line(exc), live,
                                                  exc.failure_class), "refusing")
    if refused is None:
        return f"job {lease.job_id}: refused, but its lease was already gone"
    if refused.failed:
        return f"job {lease.job_id}: failed: every live worker refused it ({exc})"
    _post_now(engine, settings, lease.job_id)
    return f"job {lease.job_id}: handed back, this worker cannot {exc.cannot}: {exc}"


def _defer(worker: WorkerContext, lease: leases.Lease, exc: Unavailable) -> str:
    """An outage that may pass outlasted the job's own tries: hand the job back, due
    later, without refusing it (the next claim tries again, here or on another worker);
    refuse it once it was deferred as often as ``leases.DEFER_WAITS`` allow."""
    patient = _patient(worker.settings.repost_after, lease.job_id)
    wait = patient(lambda: leases.defer(worker.engine(), lease, first_line(exc)), "deferring")
    if wait is None:
        return f"job {lease.job_id}: deferred, but its lease was already gone"
    if wait == 0:
        return _refuse(worker, lease, exc)
    return f"job {lease.job_id}: handed back for {wait} s, this worker cannot {exc.cannot}: {exc}"


def _retry_or_fail(engine: Engine, lease: leases.Lease, max_attempts: int, exc: FarmError,
                   patient: Callable[[Callable[[], bool], str], bool]) -> str:
    """Failures that can pass (timeouts, crashes, dropped requests) run again after a
    backoff, kept in the database, until the attempts run out; the others fail at once
    with their class."""
    failure = exc.failure_class
    if failure not in RETRYABLE or lease.attempt >= max_attempts:
        patient(lambda: leases.finish(engine, lease, JobState.FAILED,
                                      f"attempt {lease.attempt}: {exc}", failure), "finishing")
        return f"job {lease.job_id}: failed ({failure}) on attempt {lease.attempt}: {exc}"
    backoff = min(300, 10 * 2 ** lease.attempt)
    patient(lambda: leases.retry_later(engine, lease, backoff,
                                       f"attempt {lease.attempt} failed, retrying: {exc}",
                                       failure), "queueing a retry")
    return (f"job {lease.job_id}: attempt {lease.attempt} failed ({failure}); due again "
            f"in {backoff} s")
