"""Job ownership on PostgreSQL: claims, renewals, guarded writes, reaping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from farm.store import leases, registry
from farm.store.models import Campaign, Job, Run, Worker


@pytest.fixture
def engine(pg_engine: Engine) -> Engine:
    return pg_engine


def _job(engine: Engine, max_attempts: int = 2) -> int:
    with Session(engine) as session, session.begin():
        job = Job(campaign=Campaign(name="c", matrix_path="m"), job_key="k" * 64,
                  model_name="m", build_name="b", variant_name="v", varying={}, spec={},
                  state="queued", gpu_class="cpu", max_attempts=max_attempts)
        session.add(job)
        session.flush()
        return job.id


def _run(job_id: int, rep: int) -> Run:
    return Run(job_id=job_id, arm="baseline", arm_name="b", block=0, pair=0, position=0,
               prompt_id="p", prompt_category="c", repetition=rep, prompt_tokens=1,
               generated_tokens=2, decode_tok_s=1.0, ttft_ms=1.0, e2e_ms=2.0, text="",
               server_version="v", build_name="b", model_file="m", model_size=1,
               model_sha256="0" * 64, host="h", argv=[], started_at=datetime.now(UTC))


def _insert(engine: Engine, lease: leases.Lease, run: Run) -> None:
    with leases.holding(engine, lease) as session:
        session.add(run)


def _taken_from(engine: Engine, old: leases.Lease, owner: str, seconds: int,
                run: Run) -> leases.Lease:
    """``owner`` claims the job ``old`` held (attempt 2); ``old`` then writes nothing: no
    run, no renewal, no finish. The new lease."""
    new = leases.claim(engine, old.job_id, owner, seconds)
    assert new == leases.Lease(old.job_id, owner, 2)
    with pytest.raises(leases.LeaseLost):
        _insert(engine, old, run)
    with pytest.raises(leases.LeaseLost):
        leases.renew(engine, old, seconds)
    assert not leases.finish(engine, old, "done")
    return new


def _expire(engine: Engine, job_id: int) -> None:
    with Session(engine) as session, session.begin():
        session.execute(update(Job).where(Job.id == job_id)
                        .values(lease_expires_at=func.now() - timedelta(seconds=1)))


def test_only_one_worker_claims_a_job(engine: Engine) -> None:
    job_id = _job(engine)
    lease = leases.claim(engine, job_id, "a", 30)
    assert lease == leases.Lease(job_id, "a", 1)
    assert leases.claim(engine, job_id, "b", 30) is None


def test_expired_lease_is_reaped_and_the_old_owner_can_write_nothing(engine: Engine) -> None:
    job_id = _job(engine)
    old = leases.claim(engine, job_id, "a", 30)
    assert old is not None
    _insert(engine, old, _run(job_id, 0))
    _expire(engine, job_id)
    [reaped] = leases.reap_expired(engine)
    assert reaped == leases.Reaped(job_id, "cpu", failed=False)
    new = _taken_from(engine, old, "b", 30, _run(job_id, 1))
    _insert(engine, new, _run(job_id, 1))
    assert leases.finish(engine, new, "done")
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 2
        assert session.get_one(Job, job_id).state == "done"


def test_a_job_that_loses_its_worker_too_often_fails_instead_of_looping(engine: Engine) -> None:
    job_id = _job(engine, max_attempts=2)
    for owner in ("a", "b"):
        assert leases.claim(engine, job_id, owner, 30) is not None
        _expire(engine, job_id)
        leases.reap_expired(engine)
    with Session(engine) as session:
        job = session.get_one(Job, job_id)
        assert job.state == "failed" and "2 attempts" in (job.error or "")
    assert leases.claim(engine, job_id, "c", 30) is None


def test_a_deferred_job_waits_uncounted_and_unrefused_until_its_waits_run_out(
        engine: Engine) -> None:
    job_id = _job(engine, max_attempts=1)
    for turn, wait in enumerate((30, 60)):
        lease = leases.claim(engine, job_id, "a", 30)
        assert lease == leases.Lease(job_id, "a", 1), "a deferral counts no attempt"
        assert leases.defer(engine, lease, "the Hub answered 503", (30, 60)) == wait
        with Session(engine) as session:
            job = session.get_one(Job, job_id)
            assert (job.state, job.deferrals, job.refusals) == ("queued", turn + 1, {})
            assert job.error == f"waiting {wait} s for an outage to pass: the Hub answered 503"
            due, now = session.execute(select(Job.due_at, func.now())
                                       .where(Job.id == job_id)).one()
            assert due is not None and timedelta(seconds=wait - 5) < due - now <= timedelta(
                seconds=wait)
        assert leases.claim(engine, job_id, "a", 30) is None, "not before it is due"
        with Session(engine) as session, session.begin():
            session.execute(update(Job).where(Job.id == job_id).values(due_at=None))
    lease = leases.claim(engine, job_id, "a", 30)
    assert lease is not None
    assert leases.defer(engine, lease, "still 503", (30, 60)) == 0, "refuse it now"
    _expire(engine, job_id)
    leases.reap_expired(engine)
    assert leases.defer(engine, lease, "late", (30, 60)) is None


def _worker(engine: Engine, name: str, host: str, silent: float) -> None:
    """A registered worker on ``host`` whose last heartbeat was ``silent`` seconds ago."""
    registry.register(engine, name, {"host": host, "gpu_class": "cpu", "devices": [],
                                     "gpus": [], "builds": {}, "models": [], "pid": 1})
    with Session(engine) as session, session.begin():
        session.execute(update(Worker).where(Worker.name == name).values(
            heartbeat_at=func.now() - timedelta(seconds=silent)))


# The heartbeat interval: the owner is gone after two missed beats (20 s of silence) while
# another worker of its host beat within one (10 s).
BEAT = 10.0


@pytest.mark.parametrize(("owner_silent", "sibling", "taken"), [
    (25, ("h", 5), True),     # two beats missed, the host's other worker beats: gone
    (15, ("h", 5), False),    # one beat missed: a slow beat, not a dead process
    (25, ("h", 15), False),   # the host's other worker is silent too: its network, maybe
    (25, ("h2", 5), False),   # only a worker of another host beats: the owner's host unknown
    (25, None, False),        # alone on its host: wait out the lease
])
def test_a_job_is_taken_early_only_from_an_owner_whose_host_still_beats(
        engine: Engine, owner_silent: float, sibling: tuple[str, float] | None,
        taken: bool) -> None:
    job_id = _job(engine)
    _worker(engine, "a", "h", owner_silent)
    if sibling is not None:
        _worker(engine, "b", *sibling)
    old = leases.claim(engine, job_id, "a", 300)
    assert old is not None
    assert leases.reap_expired(engine) == [], "without the interval only the lease counts"
    reaped = leases.reap_expired(engine, BEAT)
    assert reaped == ([leases.Reaped(job_id, "cpu", failed=False)] if taken else [])
    with Session(engine) as session:
        job = session.get_one(Job, job_id)
        assert job.state == ("lost" if taken else "running")
        if taken:
            assert job.error == ("a stopped heartbeating while its host's other workers "
                                 "beat: its job taken before its lease expired")
    if taken:  # the same guarantee as an expiry: the old attempt writes nothing
        _taken_from(engine, old, "b", 300, _run(job_id, 0))
