"""A board's inputs beyond the bundle file itself (tests/security/test_bundles.py has
those): the names and key files `farm board trust` takes, the store `--board` names, and
the jobs of a stranger's bundle, which are data on a board and never work for a worker,
whatever their specs say."""

from __future__ import annotations

import base64
import json
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


def test_a_strangers_flag_names_are_shown_as_text_and_aliases_read_as_one(
        tmp_path: Path, board: Engine) -> None:
    # Flag names no farm writes (markup, a newline, an alias, a path) are a stranger's
    # words on the board: its setting's text, escaped on every page, never refused or run.
    engine, ids = _store(tmp_path, {"fine": {}})
    with Session(engine) as session, session.begin():
        job = session.get_one(Job, ids[0])
        spec = dict(job.spec)
        spec["variant"] = {**spec["variant"], "flags": [
            *spec["variant"]["flags"], ["<script>alert(1)</script>", "1"], ["a\nb", "x"],
            ["-ngl", "99"], ["../../etc/passwd", True]]}
        session.execute(update(Job).where(Job.id == ids[0]).values(spec=spec))
    added = add_bundle(board, _bundle(engine, tmp_path, "a.zip"), require_signed=False)
    assert (added.jobs, added.refused) == (1, [])
    env = {"FARM_DATA_DIR": str(tmp_path / "data"),
           "FARM_BOARD_URL": f"sqlite:///{tmp_path / 'board.db'}"}
    shown = run_cli("board", "show", "--format", "json", env=env)
    assert shown.exit_code == 0, shown.output
    [row] = json.loads(shown.stdout)["rows"]
    assert "--n-gpu-layers 99" in row["setting"] and "--<script>alert(1)</script> 1" in \
        row["setting"]
    site = tmp_path / "site"
    assert run_cli("board", "site", "-o", str(site), env=env).exit_code == 0
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert "<script" not in text and "&lt;script&gt;" in text, page
    with Session(board) as session:
        assert session.scalar(select(Job.state)) == JobState.DONE  # recomputed, never run


def test_a_strangers_engine_curve_job_is_a_curve_point_never_a_setting(
        tmp_path: Path, board: Engine) -> None:
    # A synthetic-acceptance job (--spec-synth-len) from a bundle is taken as a point of its
    # machine's engine curve: not a row of the board, and never work for a worker.
    engine, ids = _store(tmp_path, {"fine": {}, "synthetic": {}})
    with Session(engine) as session, session.begin():
        job = session.get_one(Job, ids[1])
        spec = dict(job.spec)
        spec["variant"] = {**spec["variant"], "flags": [
            *spec["variant"]["flags"], ["spec-synth-len", "1e308"]]}
        session.execute(update(Job).where(Job.id == ids[1]).values(spec=spec))
    added = add_bundle(board, _bundle(engine, tmp_path, "a.zip"), require_signed=False)
    assert (added.jobs, added.refused) == (2, [])
    shown = run_cli("board", "show", "--format", "json", env={
        "FARM_DATA_DIR": str(tmp_path / "data"),
        "FARM_BOARD_URL": f"sqlite:///{tmp_path / 'board.db'}"})
    assert shown.exit_code == 0, shown.output
    found = json.loads(shown.stdout)
    assert [("spec-synth" in row["setting"]) for row in found["rows"]] == [False]
    with Session(board) as session:
        assert set(session.scalars(select(Job.state))) == {JobState.DONE}
