"""``farm board add`` on bundles made from a store (``farm.board.share``): the contributing
rules (too few pairs, a busy machine, arms at different --parallel, an unreadable spec),
each job and run taken once by its identity (a larger re-shared bundle adds only its new
runs), and a bundle that fails half-way changing nothing."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from farm.board import add as board_add
from farm.board.add import add_bundle
from farm.board.bundle import write_bundle
from farm.board.share import Places, collect
from farm.board.view import board_jobs
from farm.matrix.load import load_matrix
from farm.results.finish import finished_job_values
from farm.store import repo
from farm.store.board import BoardJob
from farm.store.db import make_engine, upgrade
from farm.store.models import Job, JobState, Run
from tests.helpers import matrix_dict, write_matrix

MACHINE = "fedcba9876543210" * 2


def _runs(job_id: int, numbers: range, rng: np.random.Generator, models: Path,
          **extra: Any) -> list[Run]:
    """Counterbalanced block pairs of two repetitions, the variant 20% faster."""
    runs = []
    for pair in numbers:
        order = ("baseline", "variant") if pair % 2 == 0 else ("variant", "baseline")
        for position, arm in enumerate(order):
            for repetition in range(2):
                speed = (120.0 if arm == "variant" else 100.0) * float(np.exp(
                    rng.normal(0, 0.01)))
                argv = ["/opt/llama-server", "--model", str(models / "m.gguf"),
                        *extra.get(f"{arm}_argv", [])]
                runs.append(Run(
                    job_id=job_id, arm=arm, arm_name=arm, block=2 * pair + position, pair=pair,
                    position=position, prompt_id="copy", prompt_category="rewrite",
                    repetition=repetition, prompt_tokens=10, generated_tokens=32,
                    decode_tok_s=speed, ttft_ms=5.0, e2e_ms=300.0,
                    spec_drafts=4 if arm == "variant" else 0,
                    spec_drafted=12 if arm == "variant" else 0,
                    spec_accepted=9 if arm == "variant" else 0, text="t",
                    server_version="version: 11434 (abc1234)", build_name="cpu",
                    model_file=str(models / "m.gguf"), model_size=1,
                    model_sha256="ab" * 32, host="box", argv=argv,
                    node_other_cores=extra.get("cores", 0.01),
                    started_at=datetime(2025, 1, 1, 0, pair, position, tzinfo=UTC)))
    return runs


def _store(tmp_path: Path, plans: dict[str, dict[str, Any]]) -> tuple[Engine, list[int]]:
    """A store with campaign ``mine``: one finished job per variant in ``plans`` (its
    pairs and extras)."""
    engine = make_engine(f"sqlite:///{tmp_path / 'farm.db'}")
    upgrade(engine)
    models = tmp_path / "models"
    matrix = matrix_dict(models / "m.gguf", campaign="mine", variants=[
        {"name": name, "flags": {"spec-type": "ngram-simple", "spec-draft-n-max": 4 + number}}
        for number, name in enumerate(plans)])
    specs = load_matrix(write_matrix(tmp_path, matrix))[1]
    ids = repo.register(engine, "mine", "m.yaml", specs)
    rng = np.random.default_rng(7)
    with Session(engine) as session, session.begin():
        for job_id, plan in zip(ids, plans.values(), strict=True):
            session.add_all(_runs(job_id, range(plan.get("pairs", 3)), rng, models,
                                  **{key: value for key, value in plan.items()
                                     if key != "pairs"}))
    for job_id, plan in zip(ids, plans.values(), strict=True):  # as the farm finishes them
        repo.mark_finished(engine, job_id, JobState.DONE, summary=finished_job_values(
            engine, job_id, _spec(engine, job_id), asked=True, pairs=plan.get("pairs", 3),
            stop_reason="fixed"))
    return engine, ids


def _spec(engine: Engine, job_id: int) -> Any:
    from farm.matrix.spec import JobSpec

    with Session(engine) as session:
        return JobSpec.model_validate(session.get_one(Job, job_id).spec)


def _bundle(engine: Engine, tmp_path: Path, name: str) -> Path:
    jobs, runs = collect(engine, ["mine"], machine_id=MACHINE, places=Places(
        tmp_path / "models"))
    path = tmp_path / name
    write_bundle(path, machine_id=MACHINE, campaigns=["mine"], with_host=False, jobs=jobs,
                 runs=runs)
    return path


@pytest.fixture
def board(tmp_path: Path) -> Engine:
    engine = make_engine(f"sqlite:///{tmp_path / 'board.db'}")
    upgrade(engine)
    return engine


def test_the_contributing_rules_keep_jobs_off_the_board_with_their_reason(
        tmp_path: Path, board: Engine) -> None:
    engine, _ = _store(tmp_path, {
        "fine": {}, "short": {"pairs": 2}, "busy": {"cores": 1.2},
        "parallel": {"variant_argv": ["--parallel", "2"]}})
    added = add_bundle(board, _bundle(engine, tmp_path, "a.zip"), require_signed=False)
    reasons = dict(added.refused)
    print(added)
    assert added.jobs == 4 and len(reasons) == 3
    assert sorted(reasons.values()) == [
        "arms at different --parallel (1, 2)",
        "run beside other work (6 busy blocks): a busy machine halves decode speed",
        "too few pairs (2; the board needs 3)"]
    [fine] = board_jobs(board).to_dict("records")
    assert "--spec-draft-n-max 4 --spec-type ngram-simple" in str(fine["setting"])
    assert 1.15 < np.exp(float(fine["log_speedup"])) < 1.25 and fine["acceptance"] == 0.75
    with Session(board) as session:
        assert session.scalar(select(func.count()).select_from(BoardJob).where(
            BoardJob.refused.is_not(None))) == 3


def test_a_larger_bundle_shared_again_adds_only_its_new_runs(
        tmp_path: Path, board: Engine) -> None:
    engine, ids = _store(tmp_path, {"fine": {}})
    first = add_bundle(board, _bundle(engine, tmp_path, "a.zip"), require_signed=False)
    assert (first.jobs, first.runs) == (1, 12)
    assert add_bundle(board, tmp_path / "a.zip", require_signed=False).known
    with Session(engine) as session, session.begin():  # the job ran two pairs more
        session.add_all(_runs(ids[0], range(3, 5), np.random.default_rng(8),
                              tmp_path / "models"))
    again = add_bundle(board, _bundle(engine, tmp_path, "b.zip"), require_signed=False)
    assert (again.known, again.jobs, again.runs, again.refused) == (False, 0, 8, [])
    with Session(board) as session:
        assert session.scalar(select(func.count()).select_from(Run)) == 20
        assert session.scalar(select(Job.pairs)) == 5  # recomputed over every run


def test_a_bundle_that_fails_half_way_changes_nothing(
        tmp_path: Path, board: Engine, monkeypatch: pytest.MonkeyPatch) -> None:
    engine, _ = _store(tmp_path, {"fine": {}, "other": {}})
    path = _bundle(engine, tmp_path, "a.zip")
    calls = []

    def fail_on_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("the disk filled up")
        return real(*args, **kwargs)

    real = board_add._store_job
    monkeypatch.setattr(board_add, "_store_job", fail_on_second)
    with pytest.raises(RuntimeError, match="disk filled"):
        add_bundle(board, path, require_signed=False)
    with Session(board) as session:
        for table in (Job, Run, BoardJob):
            assert session.scalar(select(func.count()).select_from(table)) == 0
    monkeypatch.setattr(board_add, "_store_job", real)
    assert add_bundle(board, path, require_signed=False).jobs == 2
