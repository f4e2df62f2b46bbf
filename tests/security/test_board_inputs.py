"""A board's inputs beyond the bundle file itself (tests/security/test_bundles.py has
those): the names and key files `farm board trust` takes, the store `--board` names, and
the jobs of a stranger's bundle, which are data on a board and never work for a worker,
whatever their specs say."""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from farm.board import add as board_add
from farm.board.add import add_bundle
from farm.board.trust import trust
from farm.errors import ConfigError
from farm.store.board import BoardJob
from farm.store.db import make_engine, upgrade
from farm.store.models import Job, JobState
from tests.helpers import run_cli
from tests.integration.test_board_add import _bundle, _store


@pytest.fixture
def board(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'board.db'}")
    upgrade(engine)
    return engine


@pytest.mark.parametrize("name", ["", " ", "a\nb", "bell\a", "../alice", "<script>x</script>",
                                  "a" * 101, "alice;rm -rf /"])
def test_a_name_the_board_would_show_is_plain(board: Engine, tmp_path: Path,
                                              name: str) -> None:
    key = tmp_path / "k.pub"
    key.write_text(base64.b64encode(b"k" * 32).decode() + "\n")
    with pytest.raises(ConfigError, match="--name"):
        trust(board, key, name)


@pytest.mark.parametrize("body", [b"", b"not base64 !!", base64.b64encode(b"k" * 31),
                                  base64.b64encode(b"k" * 33), b"\x00" * 44,
                                  b"-----BEGIN PRIVATE KEY-----\n"])
def test_a_file_that_is_not_a_public_key_is_refused_by_name(
        board: Engine, tmp_path: Path, body: bytes) -> None:
    key = tmp_path / "k.pub"
    key.write_bytes(body)
    with pytest.raises(ConfigError, match=f"{key}: not a public key file"):
        trust(board, key, "alice")


def test_a_fifo_given_as_a_key_is_refused_not_waited_on(board: Engine, tmp_path: Path) -> None:
    fifo = tmp_path / "k.pub"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a public key file"):
        trust(board, fifo, "alice")


def test_the_board_is_never_the_farms_own_store(tmp_path: Path) -> None:
    own = f"sqlite:///{tmp_path / 'farm.db'}"
    result = run_cli("board", "show", "--board", own, env={"FARM_DATABASE_URL": own})
    assert result.exit_code == 2
    assert "--board: that is the farm's own store" in result.stderr
    assert not (tmp_path / "farm.db").exists()


def test_a_strangers_job_is_never_queued_whatever_its_spec_names(
        tmp_path: Path, board: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, ids = _store(tmp_path, {"fine": {}})
    # The contributor's spec names a model outside any models dir and a draft model file
    # elsewhere: on a board it is data, stored as written, never resolved or run.
    with Session(engine) as session, session.begin():
        job = session.get_one(Job, ids[0])
        spec = dict(job.spec)
        spec["model"] = {**spec["model"], "path": "../../../etc/passwd"}
        spec["variant"] = {**spec["variant"], "flags": [
            *spec["variant"]["flags"], ["spec-draft-model", "/etc/shadow"]]}
        session.execute(update(Job).where(Job.id == ids[0]).values(spec=spec))
    path = _bundle(engine, tmp_path, "a.zip")

    def stop(*_: Any, **__: Any) -> None:
        raise RuntimeError("stopped between taking the bundle and recomputing it")

    monkeypatch.setattr(board_add, "recompute", stop)
    with pytest.raises(RuntimeError, match="stopped between"):
        add_bundle(board, path, require_signed=False)
    with Session(board) as session:
        [(state, error)] = session.execute(select(Job.state, Job.error)).all()
        assert (state, error) == (JobState.CANCELLED, "a board's job, from a bundle: never run")
        assert session.scalar(select(BoardJob.refused)) is None
