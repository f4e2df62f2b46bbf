"""A worker that fits an allocation (a Slurm job, a pod): it exits once idle, after a number
of jobs, or at its deadline, and never claims a job its estimate says cannot finish before
the deadline.

``Allocation`` holds the options, parsed once by ``farm worker``; ``Claims`` is what the
pool child checks before each claim and counts after it (two counters in shared memory,
made before the pool forks); ``Watch`` is the main process's thread that stops the
worker: gently when it is idle, out of jobs to take or out of time for the next one (a
running job finishes), at once at the deadline (the SIGTERM path: the job is handed back,
its attempt not counted).
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import re
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field
from sqlalchemy import Engine, and_, func, select
from sqlalchemy.orm import Session

from farm.errors import ConfigError, first_line
from farm.retry import OUTAGE
from farm.store.models import Job, JobState
from farm.store.outbox import PENDING

log = logging.getLogger("farm.worker")

# Seconds from a stop at the deadline (or a SIGTERM) to the worker's exit that the farm
# plans for: the llama-server stopped, the job handed back and posted, the worker's row
# marked stopped. Measured in seconds (docs/deployment.md, "On Slurm"); the worker stops
# this long before its deadline, and Slurm's `--signal=B:TERM@120` leaves twice as much.
GRACE = 60
# How many finished jobs of the same measurement an estimate reads, the newest first.
ESTIMATE_FROM = 20


class Allocation(BaseModel):
    """What bounds a worker's life: ``farm worker --exit-when-idle/--max-jobs/--deadline``."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    exit_when_idle: float | None = Field(None, gt=0, description=(
        "Exit once nothing was reserved and the store had no pending job of the class for "
        "this many seconds."))
    max_jobs: int | None = Field(None, ge=1, description="Exit after claiming this many jobs.")
    deadline: AwareDatetime | None = Field(None, description=(
        "Be gone by then: claim no job whose estimate ends later, stop and hand the running "
        "job back GRACE seconds before it."))

    @property
    def stop_at(self) -> datetime | None:
        """When the worker stops at once: GRACE seconds before the deadline."""
        return self.deadline - timedelta(seconds=GRACE) if self.deadline else None


def _number(option: str, value: str, kind: type[float] | type[int]) -> float:
    try:
        number = kind(value)
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or number <= 0:
        what = "a whole number, 1 or more" if kind is int else "a number of seconds above 0"
        raise ConfigError(f"{option} {value[:40]!r}: {what}")
    return number


def parse_deadline(value: str, now: datetime) -> datetime:
    """``--deadline``: seconds from ``now``, or an ISO 8601 time (without a zone: this
    machine's local time); a ConfigError if it cannot be read or is already past."""
    try:
        moment = now + timedelta(seconds=float(value))
    except (ValueError, OverflowError):
        try:
            moment = datetime.fromisoformat(value)
        except ValueError:
            raise ConfigError(f"--deadline {value[:40]!r}: seconds from now (3600) or an ISO time "
                              "(2026-12-07T18:00:00Z)") from None
        moment = moment if moment.tzinfo else moment.astimezone()
    if moment <= now:
        raise ConfigError(f"--deadline {value[:40]!r}: already past; give a later time")
    return moment.astimezone(UTC)


def parse_allocation(exit_when_idle: str | None, max_jobs: str | None, deadline: str | None,
                     now: datetime) -> Allocation:
    """The three options as given on the command line (strings), each checked with a
    one-line error naming it."""
    return Allocation(
        exit_when_idle=None if exit_when_idle is None else _number(
            "--exit-when-idle", exit_when_idle, float),
        max_jobs=None if max_jobs is None else int(_number("--max-jobs", max_jobs, int)),
        deadline=None if deadline is None else parse_deadline(deadline, now))


# What squeue prints for a job without an end.
_NO_END = {"", "unlimited", "n/a", "none", "unknown"}


def slurm_end(job_id: str, end_time: str | None) -> datetime | None:
    """The end of Slurm job ``job_id``'s allocation (an array task as ``ARRAYJOB_TASK``:
    an array's tasks share its ``SLURM_JOB_ID``): ``SLURM_JOB_END_TIME`` (epoch seconds,
    set by newer Slurm) when given, else ``squeue -h -j ID -o %e`` (its local time);
    None for a job without a time limit. A ConfigError when neither can be read."""
    if end_time and end_time.isdigit():
        return datetime.fromtimestamp(int(end_time), UTC)
    if not re.fullmatch(r"[0-9]{1,20}(_[0-9]{1,10})?", job_id):
        raise ConfigError(f"SLURM_JOB_ID {job_id[:40]!r} is not a job id; pass --deadline")
    try:
        shown = subprocess.run(["squeue", "-h", "-j", job_id, "-o", "%e"], capture_output=True,
                               text=True, timeout=30, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError) as exc:
        raise ConfigError(f"under Slurm job {job_id}, its end could not be read with squeue "
                          f"({type(exc).__name__}); pass --deadline") from exc
    if shown.lower() in _NO_END:
        return None
    try:
        return datetime.fromisoformat(shown).astimezone(UTC)
    except ValueError:
        raise ConfigError(f"squeue gave Slurm job {job_id}'s end as {shown[:40]!r}; pass "
                          "--deadline") from None


def estimate(engine: Engine, job_id: int) -> float | None:
    """Seconds the job should take: the median of the finished attempts of the same
    measurement (its comparable key), else of its campaign's jobs of its class; None while
    neither has finished one (then nothing says it cannot finish in time)."""
    with Session(engine) as session:
        job = session.get(Job, job_id)
        if job is None:
            return None
        done = and_(Job.state == JobState.DONE, Job.started_at.is_not(None),
                    Job.finished_at.is_not(None))
        same_class = and_(Job.campaign_id == job.campaign_id, Job.gpu_class == job.gpu_class)
        alike = [same_class] if job.comparable_key is None else [
            Job.comparable_key == job.comparable_key, same_class]
        for condition in alike:
            spans = [(end - start).total_seconds() for start, end in session.execute(
                select(Job.started_at, Job.finished_at).where(done, condition)
                .order_by(Job.finished_at.desc()).limit(ESTIMATE_FROM)) if start and end]
            if spans:
                return statistics.median(spans)
    return None


def pending_jobs(engine: Engine, gpu_class: str) -> int:
    """Jobs of ``gpu_class`` still to run: queued or lost with an attempt left (a retry
    waiting out its backoff included)."""
    query = (select(func.count()).select_from(Job)
             .where(Job.gpu_class == gpu_class, Job.state.in_(PENDING),
                    Job.attempt < Job.max_attempts))
    with Session(engine) as session:
        return session.scalar(query) or 0


class Claims:
    """The pool child's check before each claim and its count after; the main process
    reads both. Made before the pool forks: the counters are shared memory."""

    def __init__(self, allocation: Allocation) -> None:
        self.allocation = allocation
        self._claimed = multiprocessing.Value("i", 0)
        self._out_of_time = multiprocessing.Value("b", 0)

    @property
    def claimed(self) -> int:
        """Jobs this worker claimed."""
        return int(self._claimed.value)

    @property
    def out_of_time(self) -> bool:
        """A claim was refused: the next job's estimate ends after the deadline."""
        return bool(self._out_of_time.value)

    def refusal(self, engine: Engine, job_id: int, now: datetime) -> str | None:
        """Why this worker must not claim job ``job_id`` now; None: it may."""
        allocation = self.allocation
        if allocation.max_jobs is not None and self.claimed >= allocation.max_jobs:
            return f"this worker ran its {allocation.max_jobs} job(s) (--max-jobs)"
        if self.out_of_time:  # asked again while the worker stops: no query
            return "this worker is out of time for its next job (--deadline)"
        if allocation.stop_at is None:
            return None
        left = (allocation.stop_at - now).total_seconds()
        expected = estimate(engine, job_id)
        if left <= 0 or (expected is not None and expected > left):
            self._out_of_time.value = 1
            return (f"its estimate ({expected or 0:.0f} s) ends after this worker's deadline "
                    f"({max(left, 0):.0f} s left, {GRACE} s kept to stop)")
        return None

    def counted(self) -> None:
        """One more job claimed."""
        with self._claimed.get_lock():
            self._claimed.value += 1


class Watch:
    """The main process's watch over an ``Allocation``: once a second it stops the worker
    at the deadline (a SIGTERM to itself: the running job handed back), or gently
    (``drain``: no new job, a running one finishes) when the claims are used up or out of
    time, or after ``exit_when_idle`` seconds with nothing reserved (``busy``) and no
    pending job of the class in the store (read every few seconds, not every second: a
    hundred idle workers would each query it)."""

    def __init__(self, engine: Engine, claims: Claims, gpu_class: str,
                 busy: Callable[[], bool], drain: Callable[[], None]) -> None:
        self.engine, self.claims, self.gpu_class = engine, claims, gpu_class
        self.busy, self.drain = busy, drain
        idle = claims.allocation.exit_when_idle
        self.store_every = max(1.0, min(10.0, idle / 4)) if idle else math.inf
        self._idle_since, self._looked = time.monotonic(), -math.inf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="allocation", daemon=True)

    def _loop(self) -> None:
        allocation, drained = self.claims.allocation, False
        while not self._stop.wait(1.0):
            if allocation.stop_at and datetime.now(UTC) >= allocation.stop_at:
                log.warning("deadline %s in %d s: stopping now, the running job handed "
                            "back", allocation.deadline, GRACE)
                os.kill(os.getpid(), signal.SIGTERM)
                return
            reason = None if drained else self._used_up() or self._idle()
            if reason is not None:  # a running job finishes (a drain signals it nothing),
                log.warning("exiting: %s", reason)  # unless the deadline comes first
                self.drain()
                drained = True

    def _idle(self) -> str | None:
        """Why the worker is idle enough to exit (``exit_when_idle``), or None."""
        now, window = time.monotonic(), self.claims.allocation.exit_when_idle
        if self.busy():
            self._idle_since = now
        elif window and now - self._looked >= self.store_every:
            self._looked = now
            if self._pending():
                self._idle_since = now
            elif now - self._idle_since >= window:
                return (f"idle for {now - self._idle_since:.0f} s, no pending job of class "
                        f"{self.gpu_class} (--exit-when-idle)")
        return None

    def _used_up(self) -> str | None:
        claims = self.claims
        if claims.out_of_time:
            return "the next job cannot finish before the deadline"
        limit = claims.allocation.max_jobs
        return f"{limit} job(s) claimed (--max-jobs)" if limit and claims.claimed >= limit else None

    def _pending(self) -> bool:
        try:
            return pending_jobs(self.engine, self.gpu_class) > 0
        except OUTAGE as exc:  # work unknown is not no work
            log.warning("pending jobs unreadable (%s): not idle", first_line(exc))
            return True

    def start(self) -> None:
        """Watch in a background thread until :meth:`stop`."""
        self._thread.start()

    def stop(self) -> None:
        """Stop watching (nothing to stop if it never started)."""
        self._stop.set()
        if self._thread.ident is not None:
            self._thread.join()
