"""``farm worker``: register, heartbeat and reap in the main process, run jobs in Celery."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from dataclasses import asdict

from celery import Celery
from celery.platforms import EX_OK
from celery.signals import worker_shutting_down
from celery.worker import WorkController
from celery.worker import state as worker_state
from sqlalchemy import Engine

from farm.fleet.app import make_app, queue_name, worker_queue
from farm.fleet.reconcile import reconcile
from farm.fleet.submit import require_fleet
from farm.retry import OUTAGE, FailingLog
from farm.settings import Settings
from farm.store import leases, registry
from farm.store.db import make_engine, require_current_schema
from workers.fleet import task
from workers.fleet.advertise import advertise
from workers.fleet.allocation import Allocation, Claims, Watch
from workers.fleet.config import WorkerConfig
from workers.job.runtime.sandbox import Sandbox, sandbox_status
from workers.job.telemetry import cpu_info, gpus_for_devices

log = logging.getLogger("farm.worker")
# One line per HTTP request to llama-server would drown the worker log.
logging.getLogger("httpx").setLevel(logging.WARNING)


class Heartbeat:
    """Every third of a lease: this worker is alive; expired leases, and those of workers
    known to be gone (farm.store.leases.reap_expired), are reaped (their jobs
    lost, or failed past their attempts) and every pending job whose message is missing is
    posted again. Every live worker does this, so the fleet heals as long as one worker of
    it is alive. A failing beat logs one line when it starts failing and one on recovery."""

    def __init__(self, engine: Engine, app: Celery, settings: Settings, name: str) -> None:
        self.engine, self.app, self.name = engine, app, name
        self.interval = leases.beat_seconds(settings.lease_seconds)
        self.repost_after = settings.repost_after
        self.trouble = FailingLog(
            log, f"heartbeat failing, retrying every {self.interval:.0f} s", "heartbeat recovered")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def beat(self) -> None:
        """Beat once: mark this worker alive, reap expired leases, post jobs missing a message."""
        registry.heartbeat(self.engine, self.name)
        for reaped in leases.reap_expired(self.engine, self.interval):
            if reaped.failed:
                log.warning("job %s failed: lost its worker too often", reaped.job_id)
            else:
                log.warning("job %s lost its worker; posting it again", reaped.job_id)
        posted = reconcile(self.engine, self.app, self.repost_after).posted
        if posted:
            log.warning("posted %d job(s) whose message was missing: %s", len(posted),
                        ", ".join(str(message.job_id) for message in posted[:20]))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except OUTAGE as exc:
                # A database or broker outage must not kill the heartbeat for good.
                self.trouble.failed(exc)
                continue
            self.trouble.succeeded()

    def start(self) -> None:
        """Beat every third of a lease in a background thread until :meth:`stop`."""
        self._thread.start()

    def stop(self) -> None:
        """Stop beating and wait for the thread to end."""
        self._stop.set()
        self._thread.join()


class _RejectWithoutTraceback(logging.Filter):
    """A message handed back to the queue during an outage is expected, not a crash:
    Celery logs it with a traceback; the reason alone is the one line an operator needs."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, dict) and record.args.get("description") == "rejected":
            record.exc_info, record.exc_text = None, None
        return True


def _forward_stop(worker: WorkController) -> None:
    """On a warm shutdown, tell the pool child running a job: it hands the job back at once
    instead of keeping the stop waiting for the whole job."""
    def forward(**_: object) -> None:
        for pid in worker.pool.info.get("processes", []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)

    worker_shutting_down.connect(forward, weak=False)


def _drain() -> None:
    """Stop taking messages and exit once the running job (if any) ends: Celery's warm
    shutdown without the SIGTERM that ``_forward_stop`` would pass to the job."""
    worker_state.should_stop = EX_OK


def _watch(engine: Engine, claims: Claims | None, gpu_class: str) -> Watch | None:
    if claims is None:
        return None
    return Watch(engine, claims, gpu_class, busy=lambda: bool(worker_state.reserved_requests),
                 drain=_drain)


def run_worker(settings: Settings, config: WorkerConfig,
               allocation: Allocation | None = None) -> None:
    """Serve the class's queue until stopped, idle, done with its jobs or at its deadline
    (``allocation``); llama-server children die with the worker."""
    require_fleet(settings)
    if config.sandbox is not None:  # the worker's config decides for its node
        settings = settings.model_copy(update={"sandbox": config.sandbox})
    sandbox = Sandbox(settings.sandbox)
    log.info("%s", sandbox_status(sandbox))
    # No connection held between beats (one every third of a lease: 100 s deployed), nor
    # by the pool child between uses (workers.fleet.task.WorkerContext): a fleet holds a
    # connection per worker only while it uses one.
    engine = make_engine(settings.database_url, connections=0)
    require_current_schema(engine)
    app = make_app(settings)
    advertisement = advertise(config, sandbox)
    gpus = gpus_for_devices(config.devices)
    registry.register(engine, config.worker_name, {
        **asdict(advertisement), "gpu_class": config.gpu_class, "devices": config.devices,
        "gpus": [asdict(gpu) for gpu in gpus] or [cpu_info()],
        "driver": gpus[0].driver if gpus else None, "pid": os.getpid()})
    claims = Claims(allocation) if allocation else None  # before the pool forks
    app.farm_worker = task.WorkerContext(settings=settings, config=config, gpus=gpus,
                                         claims=claims)
    logging.getLogger("celery.app.trace").addFilter(_RejectWithoutTraceback())
    heartbeat = Heartbeat(engine, app, settings, config.worker_name)
    heartbeat.beat()
    heartbeat.start()
    watch = _watch(engine, claims, config.gpu_class)
    try:
        # Its class's queue, and its own: jobs that other workers of the class refused.
        queues = [queue_name(config.gpu_class), worker_queue(config.worker_name)]
        worker = app.Worker(hostname=config.worker_name, queues=queues,
                            concurrency=1, pool="prefork", prefetch_multiplier=1,
                            task_events=True, loglevel="INFO", optimization="fair",
                            # No gossip or mingle: the job table, not other workers' state,
                            # says who runs what, and at a hundred workers each one's main
                            # process would handle every other's gossip beside its
                            # measurement. Flower still sees each worker's events.
                            without_gossip=True, without_mingle=True,
                            # The job's own limit starts once its builds are made
                            # (workers.fleet.task.job_clock) and stops while it lets other
                            # jobs' builds go first (a build's limit in all); these bound
                            # the job, its builds and those waits.
                            soft_time_limit=settings.task_time_limit,
                            time_limit=settings.task_time_limit + 300)
        _forward_stop(worker)
        if watch:
            watch.start()
        worker.start()
    finally:
        if watch:
            watch.stop()
        heartbeat.stop()
        registry.mark_stopped(engine, config.worker_name)
        engine.dispose()
