"""`farm submit` admits every job row as a worker will (``workers.job.admission.admit``)
before it stores or posts anything: a matrix whose rows load but that no worker would
start (a flag naming a file outside the models dir, a model path outside it) is refused
with one line naming the place and the reason, exit 2, and leaves no campaign, no job and
no message behind. A real submit, against a real PostgreSQL and Redis; no worker runs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, func, select

from farm.store.db import make_engine, upgrade
from farm.store.models import Campaign, Job
from tests.helpers import matrix_dict, private_redis_url, run_cli, write_matrix

# What a variant or a model says, where the one line puts it, and why it is refused.
CRAFTED: dict[str, tuple[dict[str, Any], str, str]] = {
    "absolute-flag-file": ({"variants": [{"name": "v", "flags": {
        "spec-type": "ngram-simple", "mmproj": "/etc/hostname"}}]}, "variants[0] (v)",
        "--mmproj '/etc/hostname' is an absolute path"),
    "climbing-draft": ({"variants": [{"name": "v", "flags": {
        "spec-type": "draft-simple", "spec-draft-model": "../../../root/.ssh/id_rsa"}}]},
        "variants[0] (v)", "climbs out of its folder with '..'"),
    "baseline-lora": ({"flags": {"ctx-size": 1024, "threads": 1,
                                 "lora-scaled": "a.gguf:1,/etc/shadow:2"}},
                      "flags (baseline)", "--lora-scaled '/etc/shadow' is an absolute path"),
    "model-path-outside": ({"models": [{"name": "m", "path": "/etc/hostname"}]},
                           "models[0].path", "model 'm' '/etc/hostname' is outside the "
                           "models dir"),
}


@pytest.fixture
def services(postgres_url: str) -> Iterator[tuple[dict[str, str], Engine, redis.Redis]]:
    """The FARM_* environment of a coordinator on a migrated database of its own and a
    scratch Redis database, emptied before and after."""
    broker = private_redis_url()
    queue = redis.Redis.from_url(broker)
    queue.flushdb()
    engine = make_engine(postgres_url)
    upgrade(engine)
    try:
        yield {"FARM_DATABASE_URL": postgres_url, "FARM_BROKER_URL": broker}, engine, queue
    finally:
        queue.flushdb()
        queue.close()
        engine.dispose()


def _stored(engine: Engine) -> tuple[int, int]:
    with engine.connect() as connection:
        return (connection.scalar(select(func.count()).select_from(Campaign)) or 0,
                connection.scalar(select(func.count()).select_from(Job)) or 0)


def test_a_row_no_worker_would_start_is_refused_and_nothing_is_stored_or_posted(
        tmp_path: Path, services: tuple[dict[str, str], Engine, redis.Redis]) -> None:
    env, engine, queue = services
    for name, (change, place, reason) in CRAFTED.items():
        path = write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign=name, **change),
                            f"{name}.yaml")
        result = run_cli("submit", str(path), env=env)
        assert result.exit_code == 2, (name, result.output)
        assert "Traceback" not in result.output
        [line] = result.stderr.splitlines()
        assert line.startswith(f"error: {path}: {place}: ") and reason in line, (name, line)
        assert _stored(engine) == (0, 0), name
        assert queue.dbsize() == 0, (name, queue.keys())
    # The same submit of a row a worker would start passes admission and goes on to the
    # next check, a live worker of its class (none here: nothing stored either, issue 60).
    valid = write_matrix(tmp_path, matrix_dict(Path("m.gguf"), campaign="valid"), "valid.yaml")
    result = run_cli("submit", str(valid), env=env)
    assert result.exit_code == 1 and "no live worker of GPU class" in result.stderr, \
        result.output
    assert "nothing stored" in result.output and _stored(engine) == (0, 0)
