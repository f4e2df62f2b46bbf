"""The client's clock as the witness, through the store (issue 55, item 13), on SQLite and
PostgreSQL: a server that reports its variant 1.6x faster than it ran. On a commit's build
the job's speeds and speedup are the client's, running and finished, and the report flags
the disagreement; on the operator's named build the same runs keep the server's figures,
flagged."""

from __future__ import annotations

import json
import statistics
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from farm.matrix.load import load_matrix
from farm.matrix.spec import BuildRef, BuildSource, JobSpec
from farm.results.finish import finished_job_values
from farm.results.rows import job_rows
from farm.store import repo
from farm.store.db import upgrade
from farm.store.models import Run
from farm.words import CLIENT_CLOCK, CLOCKS_DISAGREE
from tests.helpers import matrix_dict, run_cli, write_matrix

LIE, PAIRS = 1.6, 4
START = datetime(2026, 12, 1, tzinfo=UTC)


def _specs(folder: Path) -> tuple[JobSpec, JobSpec]:
    """The job on the operator's build ``cpu``, and the same on a commit's build."""
    named = load_matrix(write_matrix(folder, matrix_dict(Path("m.gguf"))))[1][0]
    source = BuildSource(git="https://example.org/llama.cpp.git", ref="pr", commit="a" * 40)
    built = BuildRef(name=source.local_name, source=source)
    commit = named.model_copy(update={
        "baseline": named.baseline.model_copy(update={"build": built}),
        "variant": named.variant.model_copy(update={"build": built})})
    return named, commit


def _store(engine: Engine, spec: JobSpec, campaign: str) -> tuple[int, list[float]]:
    """A job of ``spec`` whose variant's server reports 1.6x what the client timed; its id
    and the client's speeds of the baseline's runs."""
    [job_id] = repo.register(engine, campaign, "m.yaml", [spec])
    rng = np.random.default_rng(7)
    rows: list[Run] = []
    baseline: list[float] = []
    for pair in range(PAIRS):
        for position, arm in enumerate(("baseline", "variant") if pair % 2 == 0
                                       else ("variant", "baseline")):
            for repetition in range(2):
                true = (15.0 if arm == "variant" else 10.0) * rng.lognormal(0, 0.02)
                client = true * rng.lognormal(0, 0.003)
                baseline += [client] if arm == "baseline" else []
                rows.append(Run(
                    job_id=job_id, arm=arm, arm_name=arm, block=2 * pair + position,
                    pair=pair, position=position, prompt_id="copy", prompt_category="rewrite",
                    repetition=repetition, prompt_tokens=10, generated_tokens=32,
                    decode_tok_s=true * (LIE if arm == "variant" else 1.0),
                    client_decode_tok_s=client, ttft_ms=5.0, e2e_ms=100.0, text="t",
                    spec_drafted=40 if arm == "variant" else 0,
                    spec_accepted=20 if arm == "variant" else 0,
                    server_version="version: 1 (abc)", build_name=spec.build.name,
                    build_commit=spec.build.source.commit if spec.build.source else None,
                    model_file="m.gguf", model_size=1, model_sha256="0" * 64, host="h",
                    argv=[], started_at=START + timedelta(minutes=len(rows))))
    with Session(engine) as session, session.begin():
        session.add_all(rows)
    return job_id, baseline


def _finish(engine: Engine, job_id: int, spec: JobSpec) -> None:
    repo.mark_finished(engine, job_id, "done", summary=finished_job_values(
        engine, job_id, spec, asked=True, pairs=PAIRS, stop_reason="fixed"))


def test_a_commit_jobs_speeds_are_the_clients_and_the_lie_is_flagged(
        engine: Engine, url: str, tmp_path: Path) -> None:
    upgrade(engine)
    named, commit = _specs(tmp_path)
    on_named, _ = _store(engine, named, "named")
    on_commit, client_baseline = _store(engine, commit, "commit")
    # Running: the report reads the runs, each job's speeds by its clock.
    [running] = job_rows(engine, "commit")
    assert running["baseline_tok_s"] == pytest.approx(statistics.median(client_baseline))
    assert running["speedup"] == pytest.approx(1.5, rel=0.05)
    _finish(engine, on_named, named)
    _finish(engine, on_commit, commit)
    [lied] = job_rows(engine, "named")
    [witnessed] = job_rows(engine, "commit")
    # The operator's build: the server's figures, the lie in the speedup, flagged.
    assert lied["speed_clock"] == "server" and lied["clock_flag"] is True
    assert lied["speedup"] == pytest.approx(1.5 * LIE, rel=0.05)
    # The commit's: the client's figures, the lie out of the speedup, flagged all the same.
    assert witnessed["speed_clock"] == "client" and witnessed["clock_flag"] is True
    assert witnessed["speedup"] == pytest.approx(1.5, rel=0.05)
    assert witnessed["baseline_tok_s"] == pytest.approx(statistics.median(client_baseline))
    assert witnessed["clock_disagreement"] == pytest.approx(LIE, rel=0.01)
    assert witnessed["clock_ratio_baseline"] == pytest.approx(1.0, abs=0.01)
    table = run_cli("report", "commit", env={"FARM_DATABASE_URL": url})
    assert table.exit_code == 0, table.output
    assert CLOCKS_DISAGREE in table.output and CLIENT_CLOCK in table.output
    rows = json.loads(run_cli("report", "named", "--format", "json",
                              env={"FARM_DATABASE_URL": url}).output)["jobs"]
    assert [(row["clock_flag"], row["speed_clock"]) for row in rows] == [(True, "server")]
