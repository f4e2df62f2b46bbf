"""The one Celery app every farm process loads (submit, workers, Flower).

Sharing it is what makes every process agree on serialization, acks and the broker's
visibility timeout.
"""

from __future__ import annotations

from celery import Celery

from farm.errors import ConfigError
from farm.settings import Settings

TASK_NAME = "farm.execute_job"


def queue_name(gpu_class: str) -> str:
    """The Celery queue for a GPU class's jobs (``gpu.CLASS``); only its workers consume it."""
    return f"gpu.{gpu_class}"


def worker_queue(worker_name: str) -> str:
    """One worker's own queue (``worker.NAME``): a job some workers of its class refused is
    posted to one that did not, so that a refuser cannot take its message and drop it."""
    return f"worker.{worker_name}"


def make_app(settings: Settings) -> Celery:
    """The farm's Celery app on ``FARM_BROKER_URL``; a ConfigError when no broker is set."""
    if not settings.broker_url:
        raise ConfigError("FARM_BROKER_URL is not set; the fleet needs Redis, e.g. "
                          "FARM_BROKER_URL=redis://:PASSWORD@HOST:6379/0")
    app = Celery("specfarm", broker=settings.broker_url, include=["workers.fleet.task"])
    app.conf.update(
        task_serializer="json", result_serializer="json", accept_content=["json"],
        task_acks_late=True,
        # The database re-posts a job whose worker died; the broker must not loop it.
        task_reject_on_worker_lost=False,
        worker_prefetch_multiplier=1,
        worker_concurrency=1,
        # Flower learns of a task when a worker receives it; a sent event per message
        # would double what a 10,000-job submit writes to Redis.
        task_send_sent_event=False,
        worker_send_task_events=True,
        task_track_started=True,
        task_ignore_result=True,
        task_default_queue=queue_name("default"),
        broker_transport_options={"visibility_timeout": settings.visibility_timeout},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )
    return app
