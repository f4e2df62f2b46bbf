"""Shared fixtures: isolated data dirs, the provisioned llama-server and models, databases."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Generator, Iterator
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import Engine

from farm.settings import load_settings
from farm.store.db import make_engine, upgrade
from tests.beside import Watch
from workers.paths import NodePaths
from workers.setup.provision import Provisioned, provision

PG_ADMIN_URL = os.environ.get("FARM_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
# Where each test's start and end go, one line each (wall clock, the xdist worker, the
# test), when set: the timeline docs/testing.md reads the suite's idle stretches from.
TIMELINE = os.environ.get("SPECFARM_TEST_TIMELINE")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Generator[None, object, object]:
    """Where the test runs (an xdist worker, or the one process): its start and end."""
    if not TIMELINE:
        return (yield)
    worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
    with open(TIMELINE, "a", encoding="utf-8") as out:
        out.write(f"{time.time():.1f} {worker} start {item.nodeid}\n")
    try:
        return (yield)
    finally:
        with open(TIMELINE, "a", encoding="utf-8") as out:
            out.write(f"{time.time():.1f} {worker} end {item.nodeid}\n")


@pytest.fixture(autouse=True)
def isolated_data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own data dir and the embedded database in it."""
    data_dir = tmp_path / "farm-data"
    monkeypatch.setenv("FARM_DATA_DIR", str(data_dir))
    monkeypatch.delenv("FARM_DATABASE_URL", raising=False)
    return data_dir


@pytest.fixture(autouse=True)
def no_colour_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test inherits the colour settings of the shell that runs it (``FORCE_COLOR``,
    ``NO_COLOR``): a table is coloured where a test asks for it."""
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture(autouse=True)
def one_thread_beside_another(request: pytest.FixtureRequest) -> Iterator[None]:
    """In tests/run's shared phase (pytest-xdist) and beside it (marked ``waits``), a
    server test that is not marked ``alone`` fails when it started a llama-server at more
    than one thread (``tests.beside``)."""
    beside = ("PYTEST_XDIST_WORKER" in os.environ
              or request.node.get_closest_marker("waits") is not None)
    if (not beside or request.node.get_closest_marker("server") is None
            or request.node.get_closest_marker("alone") is not None):
        yield
        return
    watch = Watch().start()
    try:
        yield
    finally:
        watch.stop()
    assert not watch.offending, (
        "a llama-server at more than one thread beside another test (give it --threads 1, "
        f"or mark the test alone): {sorted(watch.offending)}")


@pytest.fixture(scope="session")
def provisioned() -> Provisioned:
    """The CPU llama-server and the tiny models (built or fetched once, then cached). Every
    build a test makes, in whatever cache dir, shares the node's ccache."""
    paths = NodePaths.of(load_settings())
    os.environ.setdefault("CCACHE_DIR", str(paths.cache_dir / "ccache"))
    return provision(paths)


@pytest.fixture
def node_paths() -> NodePaths:
    """This node's folders as the settings give them (the data dir is the test's own)."""
    return NodePaths.of(load_settings())


@pytest.fixture(scope="session")
def smollm2(provisioned: Provisioned) -> Path:
    return provisioned.models["smollm2"]


@pytest.fixture(scope="session")
def qwen35_random(provisioned: Provisioned) -> Path:
    return provisioned.models["qwen35-random"]


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A fresh PostgreSQL database for one test, dropped afterwards."""
    name = f"specfarm_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base = PG_ADMIN_URL.rsplit("/", 1)[0]
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def worker_role(postgres_url: str) -> Iterator[str]:
    """A login role of its own (trust auth here), dropped with its grants afterwards."""
    role = f"sf_worker_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as owner:
        owner.execute(f'CREATE ROLE "{role}" LOGIN')
    try:
        yield role
    finally:
        with psycopg.connect(postgres_url, autocommit=True) as owner:
            owner.execute(f'DROP OWNED BY "{role}"')
            owner.execute(f'DROP ROLE "{role}"')


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store of each kind: an SQLite file, then a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'farm.db'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def engine(url: str) -> Iterator[Engine]:
    """An engine on ``url``'s store, not yet migrated (a test upgrades it as far as it
    needs)."""
    engine = make_engine(url)
    yield engine
    engine.dispose()


@pytest.fixture
def pg_engine(postgres_url: str) -> Iterator[Engine]:
    """An engine on a fresh PostgreSQL database at the newest schema."""
    engine = make_engine(postgres_url)
    upgrade(engine)
    yield engine
    engine.dispose()
