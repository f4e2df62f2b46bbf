"""``farm worker``: register, heartbeat and reap in the main process, run jobs in Celery."""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import asdict

from celery import Celery
from sqlalchemy import Engine

from farm.fleet.app import make_app, queue_name
from farm.fleet.submit import post_jobs, require_fleet
from farm.settings import Settings
from farm.store import leases, registry
from farm.store.db import make_engine, require_current_schema
from workers import tasks
from workers.config import WorkerConfig
from workers.node import advertise
from workers.telemetry import cpu_info, gpus_for_devices

log = logging.getLogger("farm.worker")
# One line per HTTP request to llama-server would drown the worker log.
logging.getLogger("httpx").setLevel(logging.WARNING)


class Heartbeat:
    """Every third of a lease: this worker is alive; any expired lease is reaped and its
    job posted again (or failed past its attempts). Every live worker reaps, so a job
    lost with a dead worker moves on as long as one worker of the fleet is alive."""

    def __init__(self, engine: Engine, app: Celery, name: str, interval: float) -> None:
        self.engine, self.app, self.name, self.interval = engine, app, name, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="heartbeat", daemon=True)

    def beat(self) -> None:
        registry.heartbeat(self.engine, self.name)
        again = []
        for reaped in leases.reap_expired(self.engine):
            if reaped.failed:
                log.warning("job %s failed: lost its worker too often", reaped.job_id)
            else:
                log.warning("job %s lost its worker; posting it again", reaped.job_id)
                again.append(reaped.job_id)
        post_jobs(self.engine, again, app=self.app)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.beat()
            except Exception:  # a database blip must not kill the heartbeat for good
                log.exception("heartbeat failed; retrying in %.0f s", self.interval)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def run_worker(settings: Settings, config: WorkerConfig) -> None:
    """Serve the class's queue until stopped; llama-server children die with the worker."""
    require_fleet(settings)
    engine = make_engine(settings.database_url)
    require_current_schema(engine)
    app = make_app(settings)
    advertisement = advertise(config)
    gpus = gpus_for_devices(config.devices)
    registry.register(engine, config.worker_name, {
        **asdict(advertisement), "gpu_class": config.gpu_class, "devices": config.devices,
        "gpus": [asdict(gpu) for gpu in gpus] or [cpu_info()],
        "driver": gpus[0].driver if gpus else None, "pid": os.getpid()})
    tasks.NODE = tasks.Node(settings=settings, config=config, gpus=gpus)
    heartbeat = Heartbeat(engine, app, config.worker_name, settings.lease_seconds / 3)
    heartbeat.beat()
    heartbeat.start()
    try:
        worker = app.Worker(hostname=config.worker_name, queues=[queue_name(config.gpu_class)],
                            concurrency=1, pool="prefork", prefetch_multiplier=1,
                            task_events=True, loglevel="INFO", optimization="fair",
                            soft_time_limit=settings.job_time_limit,
                            time_limit=settings.job_time_limit + 300)
        worker.start()
    finally:
        heartbeat.stop()
        registry.mark_stopped(engine, config.worker_name)
        engine.dispose()
