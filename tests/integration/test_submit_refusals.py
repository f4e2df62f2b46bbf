"""`farm submit` refused, with a real PostgreSQL and Redis and no worker: a submit no live
worker can run stores nothing, and the worker role's URL gets one line naming the role
and the owner's URL, never a traceback, with nothing stored."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
import yaml
from click.testing import CliRunner, Result
from sqlalchemy import func, insert, select
from sqlalchemy.exc import ProgrammingError

from farm.cli import cli
from farm.errors import ConfigError
from farm.store import registry
from farm.store.db import make_engine, upgrade
from farm.store.models import Campaign, Job
from farm.unreachable import service_error
from tests.helpers import as_role

BROKER = "redis://127.0.0.1:6379/15"


def farm(*args: str, **env: str) -> Result:
    return CliRunner().invoke(cli, list(args), env={"FARM_BROKER_URL": BROKER, **env})



@pytest.fixture
def matrix(tmp_path: Path) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({
        "campaign": "refused", "models": [{"name": "m"}], "prompts": ["hi"],
        "gpu-classes": ["nobody"],
        "variants": [{"name": "v", "flags": {"spec-type": "ngram-simple"}}]}))
    return path


@pytest.fixture
def owner_url(postgres_url: str) -> str:
    engine = make_engine(postgres_url)
    upgrade(engine)
    engine.dispose()
    return postgres_url


def _stored(url: str) -> tuple[int, int]:
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return (connection.scalar(select(func.count()).select_from(Campaign)) or 0,
                    connection.scalar(select(func.count()).select_from(Job)) or 0)
    finally:
        engine.dispose()


def test_a_submit_no_live_worker_can_run_stores_no_campaign(matrix: Path,
                                                            owner_url: str) -> None:
    result = farm("submit", str(matrix), FARM_DATABASE_URL=owner_url)
    assert result.exit_code == 1, result.output
    assert result.stdout == "campaign refused: 1 job; none a live worker can run: nothing stored\n"
    assert "no live worker of GPU class 'nobody'" in result.stderr
    assert _stored(owner_url) == (0, 0)
    # `farm status` then has no empty campaign to default to.
    assert "refused" not in farm("status", FARM_DATABASE_URL=owner_url).output


def test_submit_with_the_worker_roles_url_is_one_line_and_stores_nothing(
        matrix: Path, owner_url: str, worker_role: str) -> None:
    assert farm("db", "grant-worker", worker_role, FARM_DATABASE_URL=owner_url).exit_code == 0
    result = farm("submit", str(matrix), FARM_DATABASE_URL=as_role(owner_url, worker_role))
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # handled, not a traceback
    assert result.stdout == "" and result.stderr == (
        f"error: FARM_DATABASE_URL logs in as {worker_role}: that URL is the worker role's "
        "(it may write runs, not campaigns); `farm submit` needs the owner's URL, the role "
        "that ran `farm db upgrade`\n")
    assert _stored(owner_url) == (0, 0)


def test_any_refusal_of_the_worker_role_met_anywhere_is_one_line(
        owner_url: str, worker_role: str) -> None:
    assert farm("db", "grant-worker", worker_role, FARM_DATABASE_URL=owner_url).exit_code == 0
    worker_url = as_role(owner_url, worker_role)
    engine = make_engine(worker_url)
    try:
        with pytest.raises(ProgrammingError) as refused, engine.begin() as connection:
            connection.execute(insert(Campaign).values(name="c", matrix_path="m.yaml"))
    finally:
        engine.dispose()
    error = service_error(refused.value, worker_url, BROKER)
    assert isinstance(error, ConfigError)
    assert str(error) == (f"the database refused {worker_role}: permission denied for table "
                          "campaign; is FARM_DATABASE_URL the worker role's? `farm submit`, "
                          "`cancel` and `db` need the owner's URL, the role that ran `farm db "
                          "upgrade`")


def test_jobs_only_a_stopped_worker_can_run_are_stored_and_wait_for_it(
        matrix: Path, owner_url: str) -> None:
    """A Slurm or Kubernetes fleet scales from zero: its workers exit when idle (a clean
    stop), and their scheduler starts them again on pending jobs. Such jobs are stored and
    posted, and the submit says they wait; a worker that died without saying so counts for
    nothing (the test above)."""
    engine = make_engine(owner_url)
    try:
        registry.register(engine, "nobody@slurm-1-0", {
            "host": "node1", "gpu_class": "nobody", "devices": [], "gpus": [], "driver": None,
            "builds": {"cpu": "version: 11434"}, "sources": [], "models": ["m.gguf"],
            "pid": 1})
        registry.mark_stopped(engine, "nobody@slurm-1-0")
    finally:
        engine.dispose()
    try:
        result = farm("submit", str(matrix), FARM_DATABASE_URL=owner_url)
        assert result.exit_code == 0, result.output
        assert "posted 1 to gpu.nobody" in result.stdout
        assert "class nobody: no live worker can run some jobs; they wait for a stopped " \
               "one to start" in result.stdout
        assert _stored(owner_url) == (1, 1)
    finally:
        redis.Redis.from_url(BROKER).delete("gpu.nobody")
