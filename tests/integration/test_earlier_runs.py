"""A job's drift test reads its machine's earlier jobs from the store (issue 38): which
jobs ``earlier_runs`` finds, on SQLite and PostgreSQL, and a finished job's summary saying
how many its drift test was made against."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from farm.results.finish import finished_job_values
from farm.results.runs import DRIFT_COLUMNS, earlier_runs
from farm.stats.drift import EARLIER_MIN
from farm.store import repo
from farm.store.db import upgrade
from farm.store.models import Run
from tests.helpers import matrix_dict, write_matrix
from tests.unit.simulate_drift import job

START = datetime(2026, 12, 1, tzinfo=UTC)


def _spec(folder: Path) -> JobSpec:
    path = write_matrix(folder, matrix_dict(Path("m.gguf")), "m.yaml")
    return load_matrix(path)[1][0]


def _store(engine: Engine, spec: JobSpec, runs: pd.DataFrame, began: datetime, *,
           host: str = "h", model: str = "0" * 64) -> int:
    """A job of ``spec`` (a campaign of its own) with ``runs``, a minute apart from
    ``began``, measured on ``host`` with ``model``."""
    [job_id] = repo.register(engine, f"c{began:%d%H%M}{host}{model[:1]}", "m.yaml", [spec])
    with Session(engine) as session, session.begin():
        session.add_all(Run(
            job_id=job_id, arm=row["arm"], arm_name=row["arm"], block=row["block"],
            pair=row["pair"], position=row["position"], prompt_id=row["prompt_id"],
            prompt_category="c", repetition=row["repetition"], prompt_tokens=10,
            generated_tokens=32, decode_tok_s=row["decode_tok_s"], ttft_ms=5.0,
            e2e_ms=100.0, text="t", server_version="version: 1 (abc)", build_name="cpu",
            model_file="m.gguf", model_size=1, model_sha256=model, host=host, argv=[],
            started_at=began + timedelta(minutes=index))
            for index, row in enumerate(runs.astype(object).to_dict("records")))
    return job_id


def test_earlier_runs_are_the_machines_and_models_jobs_that_ended_before(
        engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    spec, rng = _spec(tmp_path), np.random.default_rng(1)
    day = timedelta(days=1)
    older = _store(engine, spec, job(rng, 0.5, 8), START)
    newer = _store(engine, spec, job(rng, 0.5, 8), START + day)
    _store(engine, spec, job(rng, 0.5, 8), START + 2 * day, host="other")
    _store(engine, spec, job(rng, 0.5, 8), START + 2 * day, model="1" * 64)
    # Still running when the job began: not before it.
    _store(engine, spec, job(rng, 0.5, 8), START + 3 * day - timedelta(minutes=10))
    target = _store(engine, spec, job(rng, 0.5, 8), START + 3 * day)
    found = earlier_runs(engine, target)
    assert [set(frame["job_id"]) for frame in found] == [{newer}, {older}]
    assert all(list(frame.columns) == list(DRIFT_COLUMNS) and len(frame) == 8 * 12
               for frame in found)
    assert earlier_runs(engine, older) == []


def test_a_finished_jobs_drift_test_is_made_against_its_machines_earlier_jobs(
        engine: Engine, tmp_path: Path) -> None:
    upgrade(engine)
    spec, rng = _spec(tmp_path), np.random.default_rng(2)
    sds = (0.02, 0.02)
    jobs = [_store(engine, spec, job(rng, 0.5, 16, sds=sds), START + timedelta(days=day))
            for day in range(EARLIER_MIN + 1)]

    def summary(job_id: int) -> dict[str, object]:
        values = finished_job_values(engine, job_id, spec, asked=True, pairs=8,
                                     stop_reason="fixed")
        return dict(values["summary"])

    first, last = summary(jobs[0]), summary(jobs[-1])
    assert first["drift_earlier_jobs"] == 0  # nothing before it: its own blocks
    assert last["drift_earlier_jobs"] == EARLIER_MIN
    low, high = last["drift_low"], last["drift_high"]
    assert isinstance(low, float) and isinstance(high, float) and low < high
