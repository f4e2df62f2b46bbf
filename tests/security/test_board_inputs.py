"""A board's inputs beyond the bundle file itself (tests/security/test_bundles.py has
those): the names and key files `farm board trust` takes, the store `--board` names, the
jobs of a stranger's bundle, which are data on a board and never work for a worker,
whatever their specs say; crafted values refused by `farm board add` with the board left as
it was, and a stranger's text already on a board (taken before bundles were typed) shown
without its control characters and read without overflow."""

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
from farm.store.models import Job, JobState, Run
from farm.versions import parse_version
from tests.helpers import run_cli
from tests.integration.test_board_add import _bundle, _store
from tests.security.test_board_identity import ALICE, Records, bundle, contributor, refused
from tests.security.test_bundles import CLEAR_SCREEN, OSC8_LINK, SET_TITLE

STRANGER = "5" * 32
HUGE_BUILD = "version: " + "9" * 400 + " (abc1234)"
# What a terminal acts on: ESC, BEL, the one-byte CSI.
ACTED_ON = ("\x1b", "\x07", "\x9b")


@pytest.fixture
def board(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'board.db'}")
    upgrade(engine)
    return engine


@pytest.fixture(scope="module")
def records(tmp_path_factory: pytest.TempPathFactory) -> Records:
    return contributor(tmp_path_factory.mktemp("contributor"))


def _env(board: Engine) -> dict[str, str]:
    return {"FARM_BOARD_URL": str(board.url)}


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


@pytest.mark.parametrize(("changes", "phrase"), [
    ({"gpu_name": OSC8_LINK}, "gpu_name: value error, holds a control character u+001b"),
    ({"argv": ["BUILD:cpu", SET_TITLE]}, "argv.1: value error, holds a control character"),
    ({"server_version": HUGE_BUILD}, "server_version: value error, names a build number"),
    ({"decode_tok_s": 1e300}, "decode_tok_s: input should be less than or equal to 1000000"),
    ({"e2e_ms": -1.0}, "e2e_ms: input should be greater than or equal to 0"),
    ({"prompt_tokens": 2**70}, "prompt_tokens: input should be less than or equal to 2147"),
])
def test_a_crafted_run_is_refused_and_the_board_stays_as_it_was(
        board: Engine, tmp_path: Path, records: Records, changes: dict[str, Any],
        phrase: str) -> None:
    add_bundle(board, bundle(tmp_path / "honest.zip", records, ALICE), False)
    refused(board, bundle(tmp_path / "crafted.zip", records, STRANGER, **changes),
            "runs.jsonl line 1: " + phrase)


def _flags(*flags: list[Any]) -> Any:
    def jobs(made: list[Any]) -> list[Any]:
        spec = dict(made[0].spec)
        spec["variant"] = {**spec["variant"], "flags": [*spec["variant"]["flags"], *flags]}
        return [made[0].model_copy(update={"spec": spec})]
    return jobs


@pytest.mark.parametrize(("jobs", "phrase"), [
    (lambda made: [made[0].model_copy(update={"summary": {**made[0].summary,
                                                          "speedup": "fast"}})],
     "summary: value error, not a job summary (speedup: input should be a valid number, "
     "unable to parse string as a number)"),
    (_flags([SET_TITLE, "1"]), "spec: value error, holds a control character u+001b at 0"),
    (_flags(["spec-p-min", "0.5" + CLEAR_SCREEN]), "spec: value error, holds a control"),
])
def test_a_crafted_job_is_refused_and_the_board_stays_as_it_was(
        board: Engine, tmp_path: Path, records: Records, jobs: Any, phrase: str) -> None:
    add_bundle(board, bundle(tmp_path / "honest.zip", records, ALICE), False)
    refused(board, bundle(tmp_path / "crafted.zip", records, STRANGER, jobs=jobs),
            "jobs.jsonl line 1: " + phrase)


def test_a_strangers_text_already_on_a_board_is_shown_without_control_characters(
        board: Engine, tmp_path: Path, records: Records) -> None:
    # A board that took these before bundles were typed: escapes in a GPU name and a
    # flag's name and value, and a 400-digit build number.
    add_bundle(board, bundle(tmp_path / "honest.zip", records, ALICE), False)
    with Session(board) as session, session.begin():
        session.execute(update(Run).values(gpu_name=OSC8_LINK, server_version=HUGE_BUILD))
        spec = dict(session.scalars(select(Job.spec)).one())
        spec["variant"] = {**spec["variant"], "flags": [
            *spec["variant"]["flags"], [SET_TITLE, "1"],
            ["spec-p-min", "0.5" + CLEAR_SCREEN + "\x9b2J"]]}
        session.execute(update(Job).values(spec=spec))
    for fmt in ("table", "md", "json"):
        shown = run_cli("board", "show", "--format", fmt, "--wide", env=_env(board))
        assert shown.exit_code == 0, shown.output
        assert not any(code in shown.stdout for code in ACTED_ON), (fmt, shown.stdout)
        assert "NVIDIA H100" in shown.stdout and "pwned" in shown.stdout
    site = tmp_path / "site"
    assert run_cli("board", "site", "-o", str(site), env=_env(board)).exit_code == 0
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not any(code in text for code in ACTED_ON), page
    [row] = json.loads(run_cli("board", "show", "--format", "json",
                               env=_env(board)).stdout)["rows"]
    assert row["build_min"] is None  # no build number read from 400 digits
    # Nor from more than Python turns into an int at all (4,300 digits).
    assert parse_version("version: " + "9" * 5000 + " (abc1234)") == (None, "abc1234")


def test_a_crash_between_a_jobs_finish_and_its_verdict_leaves_nothing_on_the_board(
        board: Engine, tmp_path: Path, records: Records,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A 2-pair job, which the rules refuse: the crash comes after its summary is computed
    # and before the verdict; neither is written, and it is not shown until recomputed.
    def crash(*_: Any) -> None:
        raise RuntimeError("the machine lost power")

    monkeypatch.setattr(board_add, "refusal", crash)
    with pytest.raises(RuntimeError, match="lost power"):
        add_bundle(board, bundle(tmp_path / "short.zip", records, ALICE, pairs=range(2)),
                   False)
    with Session(board) as session:
        assert session.scalar(select(Job.state)) == JobState.CANCELLED
    monkeypatch.undo()
    shown = run_cli("board", "show", "--format", "json", env=_env(board))
    assert shown.exit_code == 0 and json.loads(shown.stdout)["rows"] == []
    with Session(board) as session:
        assert session.execute(select(Job.state, BoardJob.refused).join(
            BoardJob, BoardJob.job_id == Job.id)).one() == (
            JobState.DONE, "too few pairs (2; the board needs 3)")


def test_a_stated_summary_stored_before_summaries_were_typed_is_a_difference(
        board: Engine, tmp_path: Path, records: Records) -> None:
    add_bundle(board, bundle(tmp_path / "honest.zip", records, ALICE), False)
    with Session(board) as session, session.begin():
        stated = dict(session.scalars(select(BoardJob.stated)).one())
        session.execute(update(BoardJob).values(stated={**stated, "speedup": "fast"}))
        session.execute(update(Job).values(state=JobState.CANCELLED))  # to be recomputed
    added = board_add.Added(tmp_path)
    board_add.recompute(board, board_add.pending(board), added)
    assert added.refused == [] and len(added.differences) == 1
    assert added.differences[0].endswith(": its stated summary is not one this farm reads")


def _design(**design: Any) -> Any:
    def jobs(made: list[Any]) -> list[Any]:
        return [made[0].model_copy(update={"spec": {**made[0].spec, **design}})]
    return jobs


@pytest.mark.parametrize(("design", "phrase"), [
    ({"stop_rule": "fastest"}, "stop_rule"),
    ({"stop_rule": "decision", "pairs": 2, "max_pairs": 12}, "decision design looks from 4"),
    ({"stop_rule": "fixed", "pairs": 3, "max_pairs": 12}, "a fixed design runs first_stage"),
    ({"stop_rule": "two-stage", "pairs": 4, "max_pairs": 6},
     "max_pairs (6) must equal first_stage"),
    ({"pairs": 12, "max_pairs": 4}, "below the fewest pairs the design runs"),
])
def test_a_strangers_spec_whose_pairs_no_design_runs_is_kept_off_by_its_reason(
        board: Engine, tmp_path: Path, records: Records, design: dict[str, Any],
        phrase: str) -> None:
    # Refused when the spec is read, never later when a report makes its interval.
    added = add_bundle(board, bundle(tmp_path / "crafted.zip", records, STRANGER,
                                     jobs=_design(**design)), False)
    [(_, reason)] = added.refused
    assert reason.startswith("its spec is not one this farm reads") and phrase in reason
    with Session(board) as session:
        assert session.scalar(select(Job.id)) is None
