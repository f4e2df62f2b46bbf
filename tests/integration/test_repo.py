"""Jobs are stored once per job_key: by COPY on PostgreSQL, by one executemany on SQLite,
the same rows either way, read back as the specs that were stored."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from farm.matrix.load import load_matrix
from farm.matrix.spec import JobSpec
from farm.store import repo
from farm.store.db import make_engine, upgrade
from farm.store.models import Job

# What COPY's text format has to escape, and what JSON has to: tab, newline, backslash,
# quotes, non-ASCII.
AWKWARD_PROMPT = 'a\ttab, a\nnew line, a \\ backslash, "quotes", \\N, é ü 日本'


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    url = (f"sqlite:///{tmp_path / 'farm.db'}" if request.param == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    engine = make_engine(url)
    upgrade(engine)
    yield engine
    engine.dispose()


@pytest.fixture
def specs(tmp_path: Path) -> list[JobSpec]:
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump({
        "campaign": "c", "models": [{"name": "m"}], "prompts": [AWKWARD_PROMPT],
        "flags": {"ctx-size": [1024, 2048], "threads": 2},
        "variants": [
            {"name": "ngram", "flags": {"spec-type": "ngram-simple",
                                        "spec-draft-n-max": [1, 2, 3]}},
            {"name": "unthreaded", "flags": {"threads": None, "spec-type": "ngram-simple"}},
        ]}), encoding="utf-8")
    return load_matrix(path)[1]


def test_jobs_are_stored_once_with_their_columns_and_read_back_as_their_specs(
        engine: Engine, specs: list[JobSpec]) -> None:
    ids = repo.register(engine, "c", "m.yaml", specs, max_attempts=4)
    assert len(set(ids)) == len(specs) == 8
    assert repo.register(engine, "c", "m.yaml", specs) == ids  # nothing new the second time
    with Session(engine) as session:
        jobs = {job.id: job for job in session.scalars(select(Job))}
    assert len(jobs) == len(specs)
    for job_id, spec in zip(ids, specs, strict=True):
        job = jobs[job_id]
        assert JobSpec.model_validate(job.spec) == spec
        assert job.spec["prompts"][0]["text"] == AWKWARD_PROMPT
        assert (job.job_key, job.comparable_key, job.model_name, job.build_name,
                job.variant_name, job.gpu_class, job.varying) == (
            spec.job_key, spec.comparable_key, spec.model.name, spec.build.name,
            spec.variant.name, spec.gpu_class, spec.varying)
        assert (job.state, job.attempt, job.max_attempts, job.post_gen, job.task_id,
                job.posted_at, job.translations) == ("queued", 0, 4, 0, None, None, [])
    assert any(value is None for spec in specs for value in spec.varying.values())  # a null


def test_a_grown_matrix_adds_only_its_new_jobs(engine: Engine, specs: list[JobSpec]) -> None:
    first = repo.register(engine, "c", "m.yaml", specs[:3])
    assert repo.register(engine, "c", "m.yaml", specs)[:3] == first
    with Session(engine) as session:
        assert len(session.scalars(select(Job.id)).all()) == len(specs)
