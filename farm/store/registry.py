"""Workers as rows: registration, heartbeats, and who is alive (database clock)."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, Engine, and_, func, select, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from farm.store.models import Job, JobState, Worker


def register(engine: Engine, name: str, values: dict[str, Any]) -> None:
    """Insert or refresh this worker's row (same name: a restart of the same worker)."""
    row = {"name": name, **values, "started_at": func.now(), "heartbeat_at": func.now(),
           "stopped_at": None}
    statement = postgresql.insert(Worker).values(**row)
    statement = statement.on_conflict_do_update(
        index_elements=[Worker.name],
        set_={key: statement.excluded[key] for key in row if key != "name"})
    with Session(engine) as session, session.begin():
        session.execute(statement)


def heartbeat(engine: Engine, name: str) -> None:
    """Stamp this worker alive now (database clock); a beat after a stop undoes the stop."""
    with Session(engine) as session, session.begin():
        session.execute(update(Worker).where(Worker.name == name)
                        .values(heartbeat_at=func.now(), stopped_at=None))


def mark_stopped(engine: Engine, name: str) -> None:
    """Record a clean stop, so that status shows the worker stopped rather than dead."""
    with Session(engine) as session, session.begin():
        session.execute(update(Worker).where(Worker.name == name)
                        .values(stopped_at=func.now()))


def _live(within: timedelta) -> ColumnElement[bool]:
    """SQL condition: a heartbeat within ``within`` and no stop said."""
    return and_(Worker.heartbeat_at > func.now() - within, Worker.stopped_at.is_(None))


def live_workers(engine: Engine, within: timedelta) -> list[Worker]:
    """Workers whose last heartbeat is recent and that did not say they stopped."""
    query = select(Worker).where(_live(within)).order_by(Worker.name)
    with Session(engine) as session:
        return list(session.scalars(query))


def stopped_workers(engine: Engine) -> list[Worker]:
    """Workers that said they stopped (idle, their job count or deadline reached, or an
    operator's stop): an allocation's worker, which its scheduler starts again with the
    same builds and models when jobs wait (docs/deployment.md, On Slurm)."""
    query = select(Worker).where(Worker.stopped_at.is_not(None)).order_by(Worker.name)
    with Session(engine) as session:
        return list(session.scalars(query))


def live_by_class(engine: Engine, within: timedelta) -> dict[str, list[str]]:
    """The live workers of each class by name, those holding no lease first."""
    live = select(Worker.gpu_class, Worker.name).where(_live(within)).order_by(Worker.name)
    running = select(Job.lease_owner).where(Job.state == JobState.RUNNING).distinct()
    with Session(engine) as session:
        busy = set(session.scalars(running))
        by_class: dict[str, list[str]] = {}
        for gpu_class, name in session.execute(live):
            by_class.setdefault(gpu_class, []).append(name)
    return {gpu_class: sorted(names, key=lambda name: name in busy)
            for gpu_class, names in by_class.items()}


def all_workers(engine: Engine) -> list[tuple[Worker, float]]:
    """Every worker with the seconds since its last heartbeat."""
    age = func.extract("epoch", func.now() - Worker.heartbeat_at)
    with Session(engine) as session:
        return [(worker, float(seconds)) for worker, seconds in
                session.execute(select(Worker, age).order_by(Worker.gpu_class, Worker.name))]


def node_pids(engine: Engine, host: str) -> list[int]:
    """The process ids of the workers on ``host`` that did not say they stopped: their
    trees (pool, llama-servers) are the farm's own work on that node, not other work."""
    query = select(Worker.pid).where(Worker.host == host, Worker.stopped_at.is_(None))
    with Session(engine) as session:
        return list(session.scalars(query))


def running_namesake(engine: Engine, name: str, host: str) -> int | None:
    """The process id of another worker named ``name`` still running on ``host`` (this
    machine), or None: two workers under one name would share a row, a queue and leases.
    A row whose process is gone (a killed worker restarting) or that said it stopped frees
    the name."""
    query = select(Worker.pid).where(Worker.name == name, Worker.host == host,
                                     Worker.stopped_at.is_(None))
    with Session(engine) as session:
        pid = session.scalar(query)
    if pid is None or pid == os.getpid():
        return None
    try:
        os.kill(pid, 0)  # signal 0: does the process exist, nothing sent
    except ProcessLookupError:
        return None
    except PermissionError:
        return pid  # another user's process: it exists
    return None if _zombie(pid) else pid


def _zombie(pid: int) -> bool:
    """Whether the process has exited and waits only to be reaped (a killed worker whose
    parent has not yet waited for it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return False  # no /proc: take the process as running
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]
