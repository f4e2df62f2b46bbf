"""docs/deployment.md's database setup without compose, run as written against a real
PostgreSQL: the superuser makes both roles and the owner's database, the owner (no
superuser, no CREATEROLE) makes the schema and grants the worker role. Only the names are
changed (fresh roles and database per run, dropped afterwards) and box A is this machine."""

from __future__ import annotations

import os
import re
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import pytest

from tests.conftest import PG_ADMIN_URL
from tests.e2e.test_fleet import FARM
from tests.integration.test_doc_blocks import BLOCKS, _lines, _simple_commands


@dataclass(frozen=True)
class Names:
    owner: str
    worker: str

    def url(self, role: str) -> str:
        return f"postgresql://{role}@127.0.0.1:5432/{self.owner}"


@pytest.fixture
def names() -> Iterator[Names]:
    """Fresh names for the owner role (and its database) and the worker role; whatever the
    block made of them is dropped afterwards."""
    tag = uuid.uuid4().hex[:8]
    made = Names(owner=f"sf_doc_{tag}", worker=f"sf_doc_{tag}_worker")
    try:
        yield made
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{made.owner}" WITH (FORCE)')
            admin.execute(f'DROP ROLE IF EXISTS "{made.worker}"')
            admin.execute(f'DROP ROLE IF EXISTS "{made.owner}"')


def _roles_block() -> list[str]:
    block = next(block for block in BLOCKS if block.doc == "docs/deployment.md"
                 and "CREATE ROLE specfarm_worker" in block.text)
    return _lines(block)


def test_the_roles_block_runs_as_written(names: Names) -> None:
    env = dict(os.environ)
    env.pop("FARM_DATABASE_URL", None)
    said = {}
    for line in _roles_block():
        line = re.sub(r"\bspecfarm\b", names.owner,
                      line.replace("specfarm_worker", names.worker).replace("boxA", "127.0.0.1"))
        for words in _simple_commands(line):
            if not words:
                continue  # a comment line
            if words[0] == "export":
                env.update(word.partition("=")[::2] for word in words[1:])
                continue
            argv = [FARM, *words[1:]] if words[0] == "farm" else words
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                                  check=False)
            assert done.returncode == 0, f"{line}:\n{done.stderr}"
            said[" ".join(words[:3])] = done.stdout
    assert "created the schema" in said["farm db upgrade"], said
    assert said["farm db grant-worker"].startswith(f"role {names.worker} may run jobs on ")
    # The owner made the schema; the worker role reads it and cannot make a campaign.
    with psycopg.connect(names.url(names.worker), autocommit=True) as worker:
        assert worker.execute("SELECT count(*) FROM job").fetchone() == (0,)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            worker.execute("INSERT INTO campaign (name, matrix_path) VALUES ('x', 'm.yaml')")
    with psycopg.connect(names.url(names.owner), autocommit=True) as owner:
        assert owner.execute("SELECT rolsuper, rolcreaterole FROM pg_roles WHERE rolname = "
                             "current_user").fetchone() == (False, False)
        assert owner.execute("SELECT tableowner FROM pg_tables WHERE tablename = "
                             "'campaign'").fetchone() == (names.owner,)
