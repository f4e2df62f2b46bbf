"""The database decides what still has to run; a broker message is only a hint.

A message can be lost: Redis restarted without persistence, a worker died holding it, a
database error consumed it, or a post failed while Redis was down. So every live worker's
heartbeat, and ``farm submit``, reconcile: pending jobs never posted are posted; a job
posted longer ago than the repost bound is looked up in the broker, and posted again only
if no message of it is waiting in its queue or was taken by a worker within the bound.
Posting twice is harmless (the claim is conditional); posting never is the failure. The
check keeps the queue at no more than one waiting message per pending job.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta

import redis.exceptions
from celery import Celery
from celery.utils.nodenames import anon_nodename
from kombu.exceptions import BatchPublishError, OperationalError
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.fleet.app import TASK_NAME, queue_name, worker_queue
from farm.store import outbox, registry
from farm.unreachable import broker_unreachable


@dataclass(frozen=True)
class Reconciled:
    """The messages one reconciliation posted, and how many pending jobs already had one."""

    posted: list[outbox.Message]
    waiting: int  # pending jobs whose message was found in the broker


# Pending jobs taken, posted and committed at a time: a job's row stays locked until its
# batch's messages are sent, and a worker that got one of them waits that long to claim it
# (a whole 10,000-job submit at once held the first claims for seconds).
BATCH = 500


def reconcile(engine: Engine, app: Celery, repost_after: int, campaign_id: int | None = None,
              *, recheck: bool = False, batch: int = BATCH) -> Reconciled:
    """Post every pending job (of one campaign, or all) that has no message in the broker.

    Jobs posted within ``repost_after`` seconds are taken as waiting, unless ``recheck``
    (``farm submit``) looks them all up now. ``batch`` jobs at a time, each batch committed
    once its messages are sent; each queue is read once, for the first batch that needs it.
    A job some workers refused goes to the queue of a live worker of its class that did not
    (``Routes``).
    """
    posted: list[outbox.Message] = []
    waiting, after = 0, 0
    held: set[int] = set()
    read: set[str] = set()  # the queues ``held`` has
    routes = Routes(engine, repost_after)
    while True:
        with Session(engine) as session, session.begin():
            pending = outbox.take(session, 0 if recheck else repost_after, campaign_id,
                                  after=after, limit=batch)
            posted_before = [item for item in pending if item.posted]
            unread = {queue for item in posted_before for queue in routes.queues(item)} - read
            if unread:
                held |= held_jobs(app, unread, repost_after)
                read |= unread
            outbox.confirm(session, [item.job_id for item in posted_before
                                     if item.job_id in held])
            to_post = [item for item in pending if item.job_id not in held]
            messages = outbox.mark_posted(session, to_post,
                                          {item.job_id: routes.queue(item) for item in to_post})
            # Sent before the commit: another reconciler that sees these rows unlocked
            # finds the messages in the broker. A failed send rolls the marks back.
            send(app, messages)
        posted += messages
        waiting += len(pending) - len(messages)
        if len(pending) < batch:
            return Reconciled(posted, waiting)
        after = pending[-1].job_id


class Routes:
    """Where a pending job's message goes: its class's queue; or, if workers refused it,
    the queue of a live worker of the class that did not (idle ones first, the jobs of one
    reconciliation spread over them), so that a refuser, idle while the others measure,
    cannot take every post of it and drop it. With none live, the class's queue (a worker
    that starts later consumes it). Live: heartbeat within the repost bound, after which a
    message waiting in a dead worker's queue no longer counts and the job is posted anew."""

    def __init__(self, engine: Engine, live_within: float) -> None:
        self.engine, self.live_within = engine, live_within
        self._live: dict[str, list[str]] | None = None
        self._given: Counter[str] = Counter()

    def live(self, gpu_class: str) -> list[str]:
        """The class's live workers, idle first (read once, when a refused job needs it)."""
        if self._live is None:
            self._live = registry.live_by_class(self.engine, timedelta(seconds=self.live_within))
        return self._live.get(gpu_class, [])

    def queues(self, item: outbox.Pending) -> list[str]:
        """The queues where a message of the job may wait."""
        if not item.refused_by:
            return [queue_name(item.gpu_class)]
        return [queue_name(item.gpu_class), *map(worker_queue, self.live(item.gpu_class))]

    def queue(self, item: outbox.Pending) -> str:
        """The queue to post the job to."""
        if not item.refused_by:
            return queue_name(item.gpu_class)
        allowed = [name for name in self.live(item.gpu_class) if name not in item.refused_by]
        if not allowed:
            return queue_name(item.gpu_class)
        # min keeps the idle-first order among workers given as many.
        target = min(allowed, key=lambda name: self._given[name])
        self._given[target] += 1
        return worker_queue(target)


def held_jobs(app: Celery, queues: Iterable[str], taken_within: float) -> set[int]:
    """Jobs with a message waiting in one of these queues, or taken by a worker
    (unacknowledged) less than ``taken_within`` seconds ago. A message a dead worker took
    stays unacknowledged until the visibility timeout: older than the bound, it does not
    count."""
    names = sorted(queues)
    if not names:
        return set()
    try:
        with app.connection_for_read() as connection:
            channel = connection.default_channel
            client = channel.client
            with client.pipeline(transaction=False) as pipe:
                for name in names:  # the farm posts without priorities
                    pipe.lrange(name, 0, -1)
                raw = [body for bodies in pipe.execute() for body in bodies]
            tags = client.zrangebyscore(channel.unacked_index_key,
                                        time.time() - taken_within, "+inf")
            taken = client.hmget(channel.unacked_key, tags) if tags else []
    except (OperationalError, redis.exceptions.RedisError) as exc:
        raise broker_unreachable(app.conf.broker_url, exc) from exc
    ids = [_task_id(json.loads(body)) for body in raw]
    ids += [_task_id(json.loads(entry)[0]) for entry in taken if entry]
    return {job for job in map(outbox.job_of_task, ids) if job is not None}


def _task_id(message: dict[str, object]) -> str:
    headers = message.get("headers")
    return str(headers.get("id", "")) if isinstance(headers, dict) else ""


def send(app: Celery, messages: list[outbox.Message]) -> None:
    """Send the messages to their classes' queues over one broker connection.

    Each is the task message ``send_task`` would send (Celery's own ``create_task_message``
    and ``send_task_message``), without the routing and queue declaration that
    ``send_task`` repeats for every message: each queue is declared once, and the messages
    go out in one Redis pipeline per 1,000 commands, not a round trip each.
    """
    if not messages:
        return
    amqp = app.amqp
    queues = {name: amqp.queues[name] for name in {message.queue for message in messages}}
    # Celery would work these out anew for every message (the repr of no keyword arguments,
    # this host's node name): a quarter of the time sending takes.
    same = {"kwargs": {}, "kwargsrepr": "{}", "origin": anon_nodename()}
    try:
        with app.producer_or_acquire() as producer:
            for queue in queues.values():
                producer.maybe_declare(queue)
            with producer.batch(max_size=1000):
                for message in messages:
                    task = amqp.create_task_message(message.task_id, TASK_NAME, [message.job_id],
                                                    argsrepr=message.label, **same)
                    # No retry: kombu cannot move a batch to a new connection, and a failed
                    # send rolls the marks back for the next reconciliation to post.
                    amqp.send_task_message(producer, TASK_NAME, task, declare=[], retry=False,
                                           queue=queues[message.queue])
    except (OperationalError, BatchPublishError, redis.exceptions.RedisError) as exc:
        raise broker_unreachable(app.conf.broker_url, exc) from exc
