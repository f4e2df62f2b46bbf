"""`farm status` and `farm workers` while a silent worker's lease runs out: what is known
(whose lease, its last heartbeat, when the job is re-posted at the latest), read from real
PostgreSQL rows whose heartbeat times are set by hand (no worker needed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from click.testing import CliRunner
from sqlalchemy import Engine, func, select, update
from sqlalchemy.orm import Session

from farm.cli import cli
from farm.store import registry
from farm.store.models import Campaign, Job, Worker

# Lease 300 s: a heartbeat every 100 s, a worker silent over 200 s overdue.
ENV = {"FARM_LEASE_SECONDS": "300", "FARM_BROKER_URL": "redis://127.0.0.1:6379/15",
       "COLUMNS": "200"}


def _worker(engine: Engine, name: str, silent: int, *, stopped: bool = False) -> None:
    registry.register(engine, name, {"host": "h", "gpu_class": "cpu", "devices": [],
                                     "gpus": [], "builds": {}, "models": [], "pid": 1})
    with Session(engine) as session, session.begin():
        session.execute(update(Worker).where(Worker.name == name).values(
            heartbeat_at=func.now() - timedelta(seconds=silent),
            stopped_at=func.now() if stopped else None))


def _job(key: str, state: str, owner: str | None = None, lease_left: int = 0) -> Job:
    now = datetime.now(UTC)
    return Job(job_key=key * 10, model_name="m", build_name="cpu", variant_name=f"v-{key}",
               varying={}, spec={}, state=state, attempt=1, gpu_class="cpu",
               lease_owner=owner, started_at=now - timedelta(seconds=60),
               finished_at=now if state == "done" else None,
               lease_expires_at=now + timedelta(seconds=lease_left) if owner else None)


def test_a_job_on_a_silent_worker_waits_for_its_lease_and_the_worker_is_not_heard_from(
        pg_engine: Engine, postgres_url: str) -> None:
    _worker(pg_engine, "cpu-0", silent=150 + 100)  # missed two beats: not heard from
    _worker(pg_engine, "cpu-1", silent=30)
    _worker(pg_engine, "cpu-2", silent=400)  # past a lease: dead, its jobs reaped
    _worker(pg_engine, "cpu-3", silent=500, stopped=True)
    with Session(pg_engine) as session, session.begin():
        session.add(Campaign(name="c", matrix_path="m.yaml", jobs=[
            _job("a", "done"), _job("b", "running", "cpu-0", lease_left=50),
            _job("c", "running", "cpu-1", lease_left=290),
            _job("d", "running", "ghost", lease_left=10)]))  # no such worker registered
    with Session(pg_engine) as session:
        now = session.scalar(select(func.now()))
    assert now is not None
    # The lease runs out in 50 s; a live worker's next beat (within 100 s) re-posts it.
    by = {f"{now + timedelta(seconds=150 + late):%H:%M}" for late in (0, 5)}

    result = CliRunner().invoke(cli, ["status", "c"], env={**ENV, "FARM_DATABASE_URL":
                                                           postgres_url})
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].startswith("campaign c: 4 jobs: 3 running, 1 done; about ")
    # Not "0 min": the waiting job runs again only after its re-post, then takes a minute.
    assert lines[0].endswith(("about 4 min left", "about 3 min left")), lines[0]
    assert lines[1] in {f"bbbbbbbbbb v-b: waiting for cpu-0's lease (last heartbeat 4 min "
                        f"ago; re-posted by {at} UTC at the latest)" for at in by}, lines[1]
    assert lines[2].startswith("dddddddddd v-d: waiting for ghost's lease (last heartbeat none "
                               "on record; re-posted by "), lines[2]
    running = [line for line in lines if "cpu-" in line and "waiting" not in line]
    assert len(running) == 1 and "v-c" in running[0] and "cpu-1" in running[0], lines

    result = CliRunner().invoke(cli, ["workers"], env={**ENV, "FARM_DATABASE_URL":
                                                       postgres_url})
    assert result.exit_code == 0, result.output
    cells = [[cell.strip() for cell in line.split("│")[1:-1]]
             for line in result.stdout.splitlines() if line.startswith("│ cpu-")]
    assert {row[0]: row[6] for row in cells} == {
        "cpu-0": "not heard from", "cpu-1": "live", "cpu-2": "dead", "cpu-3": "stopped"}
    # Seconds on the database's clock since the times set above (a slow machine adds some).
    assert all(0 <= int(row[7].removesuffix(" s ago")) - silent <= 10
               for row, silent in zip(cells, (250, 30, 400, 500), strict=True)), cells
