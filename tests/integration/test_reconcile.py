"""Reconciliation on real PostgreSQL and Redis: the database decides what is posted."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis
from celery import Celery
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from farm.errors import ServiceUnavailable
from farm.fleet import reconcile as reconciling
from farm.fleet.app import TASK_NAME, make_app
from farm.fleet.reconcile import held_jobs, reconcile
from farm.settings import load_settings
from farm.store import leases, outbox, registry
from farm.store.models import Campaign, Job, Worker
from tests.helpers import private_redis_url

QUEUE = "gpu.cpu"


@pytest.fixture
def engine(pg_engine: Engine) -> Engine:
    return pg_engine


@pytest.fixture
def broker() -> Iterator[tuple[Celery, redis.Redis]]:
    url = private_redis_url()
    client = redis.Redis.from_url(url)
    client.flushdb()
    app = make_app(load_settings(broker_url=url))
    yield app, client
    client.flushdb()
    client.close()


def _jobs(engine: Engine, count: int, gpu_classes: tuple[str, ...] = ("cpu",)) -> list[int]:
    with Session(engine) as session, session.begin():
        campaign = Campaign(name="c", matrix_path="m")
        jobs = [Job(campaign=campaign, job_key=f"{i:064d}", model_name="m", build_name="b",
                    variant_name=f"v{i}", varying={}, spec={}, state="queued",
                    gpu_class=gpu_classes[i % len(gpu_classes)])
                for i in range(count)]
        session.add_all(jobs)
        session.flush()
        return [job.id for job in jobs]


def _queued_jobs(client: redis.Redis) -> list[int]:
    bodies = client.lrange(QUEUE, 0, -1)
    return sorted(outbox.job_of_task(json.loads(body)["headers"]["id"]) or -1
                  for body in bodies)


def test_pending_jobs_are_posted_once_and_not_again_while_waiting(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, client = broker
    ids = _jobs(engine, 50)
    assert len(reconcile(engine, app, 60).posted) == 50
    for recheck in (False, True, True):  # within the bound nothing is looked up, unless asked
        again = reconcile(engine, app, 60, recheck=recheck)
        assert again.posted == [] and again.waiting == (50 if recheck else 0)
    assert _queued_jobs(client) == ids
    with Session(engine) as session:
        assert set(session.scalars(select(Job.task_id))) == {f"job-{i}-1" for i in ids}


def test_messages_lost_with_the_broker_are_posted_again(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, client = broker
    ids = _jobs(engine, 20)
    reconcile(engine, app, 30, recheck=True)
    client.flushdb()  # Redis restarted without persistence
    assert len(reconcile(engine, app, 60).posted) == 0  # not stale yet: not looked at
    reposted = reconcile(engine, app, 60, recheck=True).posted
    assert sorted(m.job_id for m in reposted) == ids
    assert {m.task_id for m in reposted} == {f"job-{i}-2" for i in ids}
    assert _queued_jobs(client) == ids


def test_a_message_taken_by_a_dead_worker_counts_only_within_the_bound(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, client = broker
    [job_id] = _jobs(engine, 1)
    reconcile(engine, app, 30, recheck=True)
    # What kombu does when a worker takes a message with late acks: into `unacked`.
    body = client.rpop(QUEUE)
    assert isinstance(body, bytes)
    client.hset("unacked", "tag-1", json.dumps([json.loads(body), "", QUEUE]))
    client.zadd("unacked_index", {"tag-1": time.time()})
    assert held_jobs(app, [QUEUE], 30) == {job_id}
    assert reconcile(engine, app, 30, recheck=True).posted == []
    client.zadd("unacked_index", {"tag-1": time.time() - 60})  # its worker died a while ago
    assert held_jobs(app, [QUEUE], 30) == set()
    assert [m.job_id for m in reconcile(engine, app, 30, recheck=True).posted] == [job_id]


def test_reaped_and_retried_jobs_are_posted_by_reconciliation(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, client = broker
    reaped_id, retried_id = _jobs(engine, 2)
    reconcile(engine, app, 30, recheck=True)
    client.delete(QUEUE)
    lease = leases.claim(engine, reaped_id, "dead", 30)
    retry = leases.claim(engine, retried_id, "alive", 30)
    assert lease is not None and retry is not None
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == reaped_id)
                        .values(lease_expires_at=func.now()))
    assert [r.job_id for r in leases.reap_expired(engine)] == [reaped_id]
    assert leases.retry_later(engine, retry, 1, "crashed", "crash")
    # Reaped: posted at once, with no bound to wait out. The retry: only once it is due.
    assert [m.job_id for m in reconcile(engine, app, 3600).posted] == [reaped_id]
    assert leases.claim(engine, retried_id, "early", 30) is None
    time.sleep(1.2)
    assert [m.job_id for m in reconcile(engine, app, 3600).posted] == [retried_id]
    assert _queued_jobs(client) == [reaped_id, retried_id]


def test_concurrent_reconcilers_post_each_job_once(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, client = broker
    ids = _jobs(engine, 400)
    posted: list[int] = []
    lock = threading.Lock()

    def reconciler() -> None:
        for _ in range(3):
            messages = reconcile(engine, app, 30, recheck=True).posted
            with lock:
                posted.extend(m.job_id for m in messages)

    threads = [threading.Thread(target=reconciler) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(posted) == ids
    assert _queued_jobs(client) == ids  # never more messages than pending jobs


def test_cancelled_done_and_exhausted_jobs_are_not_posted(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, _ = broker
    ids = _jobs(engine, 4)
    with Session(engine) as session, session.begin():
        changes: list[dict[str, object]] = [{"state": "cancelled"}, {"state": "done"},
                                            {"attempt": 3, "max_attempts": 3}]
        for job_id, values in zip(ids[:3], changes, strict=True):
            session.execute(update(Job).where(Job.id == job_id).values(**values))
    assert [m.job_id for m in reconcile(engine, app, 30, recheck=True).posted] == [ids[3]]


def test_each_job_is_a_celery_task_message_on_its_class_queue(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    app, _ = broker
    ids = _jobs(engine, 6, ("cpu", "h100"))
    reconcile(engine, app, 30)
    found: dict[int, tuple[str, str]] = {}
    with app.connection_for_read() as connection:
        channel = connection.default_channel
        for queue in ("gpu.cpu", "gpu.h100"):
            while (message := channel.basic_get(queue, no_ack=True)) is not None:
                args, kwargs, _embed = message.decode()  # Celery's protocol 2 body
                headers = message.headers
                assert (headers["task"], headers["root_id"], kwargs) == (
                    TASK_NAME, headers["id"], {})
                assert message.delivery_info["routing_key"] == queue
                found[args[0]] = (queue, headers["id"])
                assert headers["argsrepr"] == f"c m v{ids.index(args[0])} [{queue[4:]}]"
    assert found == {job_id: (f"gpu.{('cpu', 'h100')[n % 2]}", f"job-{job_id}-1")
                     for n, job_id in enumerate(ids)}


def test_a_send_that_fails_marks_nothing_and_the_next_reconciliation_posts_all(
        engine: Engine, broker: tuple[Celery, redis.Redis],
        monkeypatch: pytest.MonkeyPatch) -> None:
    app, client = broker
    ids = _jobs(engine, 20)

    execute = redis.client.Pipeline.execute

    def gone_at_the_push(pipeline: redis.client.Pipeline, raise_on_error: bool = True) -> Any:
        # Redis goes away as the batch of messages is sent (the queue was declared).
        if any(args[0] == "LPUSH" for args, _options in pipeline.command_stack):
            raise redis.exceptions.ConnectionError("Connection closed by server.")
        return execute(pipeline, raise_on_error)

    with monkeypatch.context() as patch:
        patch.setattr(redis.client.Pipeline, "execute", gone_at_the_push)
        with pytest.raises(ServiceUnavailable, match="cannot reach the broker"):
            reconcile(engine, app, 30)
    with Session(engine) as session:
        assert set(session.execute(select(Job.post_gen, Job.posted_at))) == {(0, None)}
    assert client.llen(QUEUE) == 0
    assert {m.task_id for m in reconcile(engine, app, 30).posted} == {f"job-{i}-1" for i in ids}
    assert _queued_jobs(client) == ids


def test_batches_post_each_job_once_and_commit_as_they_go(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    """Seven jobs in batches of three, in two classes: each posted once; a job of the first
    batch is claimable (its row unlocked) while a later batch is still being posted; and a
    recheck finds every message waiting in both queues, reading each queue once."""
    app, client = broker
    ids = _jobs(engine, 7, ("cpu", "gpu"))
    claimed_while_posting: list[bool] = []
    send = reconciling.send

    def sending(app_: Celery, messages: list[outbox.Message]) -> None:
        if messages and messages[0].job_id != ids[0]:  # a later batch: the first committed
            claimed_while_posting.append(
                leases.claim(engine, ids[0], "w", 60) is not None)
        send(app_, messages)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reconciling, "send", sending)
        first = reconcile(engine, app, 60, batch=3)
    assert sorted(m.job_id for m in first.posted) == ids and claimed_while_posting[0]
    reads: list[set[str]] = []
    held = reconciling.held_jobs

    def reading(app_: Celery, queues: set[str], within: float) -> set[int]:
        reads.append(set(queues))
        return held(app_, queues, within)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(reconciling, "held_jobs", reading)
        again = reconcile(engine, app, 60, recheck=True, batch=3)
    # The claimed job is no longer pending; the other six are found waiting.
    assert again.posted == [] and again.waiting == 6
    assert reads == [{QUEUE, "gpu.gpu"}]  # the first batch has both classes; none read again
    assert client.llen(QUEUE) + client.llen("gpu.gpu") == 7


def _worker(engine: Engine, name: str, *, alive: bool = True) -> None:
    registry.register(engine, name, {"host": "h", "gpu_class": "cpu", "devices": [],
                                     "gpus": [], "builds": {}, "models": [], "pid": 1})
    if not alive:
        with Session(engine) as session, session.begin():
            session.execute(update(Worker).where(Worker.name == name).values(
                heartbeat_at=func.now() - timedelta(minutes=5)))


def _refused_by(engine: Engine, job_ids: list[int], *names: str) -> None:
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id.in_(job_ids)).values(
            refusals={name: "cannot" for name in names}, posted_at=None))


def test_a_refused_job_goes_to_the_queue_of_a_live_worker_that_did_not_refuse_it(
        engine: Engine, broker: tuple[Celery, redis.Redis]) -> None:
    """The refuser, idle while the others measure, never receives the job again: it goes
    to another live worker's own queue, idle ones first and spread over them; a message
    waiting there counts as waiting until that worker dies; with nobody left who did not
    refuse it, the class's queue."""
    app, client = broker
    for name in ("busy", "idle", "refuser", "spare"):
        _worker(engine, name)
    _worker(engine, "dead", alive=False)
    running, *refused, plain = _jobs(engine, 5)
    assert leases.claim(engine, running, "busy", 60) is not None
    _refused_by(engine, refused, "refuser")
    posted = reconcile(engine, app, 30).posted
    assert {m.job_id: m.queue for m in posted} == {
        refused[0]: "worker.idle", refused[1]: "worker.spare", refused[2]: "worker.busy",
        plain: QUEUE}
    assert client.llen("worker.refuser") == 0 and client.llen("worker.dead") == 0
    # Found waiting in their workers' queues: not posted again.
    assert reconcile(engine, app, 30, recheck=True).posted == []
    # The idle worker dies with its message unread: its job is posted to another.
    with Session(engine) as session, session.begin():
        session.execute(update(Worker).where(Worker.name == "idle").values(
            heartbeat_at=func.now() - timedelta(minutes=5)))
    [again] = reconcile(engine, app, 30, recheck=True).posted
    assert (again.job_id, again.queue) == (refused[0], "worker.spare")
    # Every live worker but the refuser gone: the class's queue, for a worker yet to come.
    _refused_by(engine, refused[1:], "refuser", "busy", "spare")
    assert {m.queue for m in reconcile(engine, app, 30).posted} == {QUEUE}
