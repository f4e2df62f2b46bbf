"""The SQL views and the report built on them, on SQLite and PostgreSQL, with known data."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, select, text, update
from sqlalchemy.orm import Session

from farm.results.groups import group_report
from farm.results.rows import job_report, run_facts
from farm.results.runs import runs_frame
from farm.store.db import make_engine, upgrade
from farm.store.models import Campaign, Job, Run
from farm.summary import JobSummary


@pytest.fixture(params=["sqlite", "postgresql"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Engine:
    url = (f"sqlite:///{tmp_path / 'farm.db'}" if request.param == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    engine = make_engine(url)
    upgrade(engine)
    request.addfinalizer(engine.dispose)
    return engine


def _run(job: Job, arm: str, prompt: str, tok_s: float, rep: int,
         drafted: int = 0, accepted: int = 0, **metrics: float) -> Run:
    return Run(job=job, arm=arm, arm_name=arm, block=0 if arm == "baseline" else 1, pair=0,
               position=0, prompt_id=prompt, prompt_category="c", repetition=rep,
               prompt_tokens=10, generated_tokens=32, decode_tok_s=tok_s, ttft_ms=5.0,
               e2e_ms=100.0, spec_drafted=drafted, spec_accepted=accepted, text="t",
               server_version="v", build_name="cpu", model_file="m.gguf", model_size=1,
               model_sha256="0" * 64, host="h", argv=[], started_at=datetime.now(UTC),
               **metrics)


def _fill(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        campaign = Campaign(name="views", matrix_path="m.yaml")
        job = Job(campaign=campaign, job_key="k" * 64, model_name="m", build_name="cpu",
                  variant_name="v", varying={"spec-type": "ngram-simple"}, spec={},
                  state="done", gpu_class="rtx")
        empty = Job(campaign=campaign, job_key="e" * 64, model_name="m", build_name="cpu",
                    variant_name="w", varying={}, spec={}, state="queued", gpu_class="cpu")
        session.add_all([job, empty])
        for rep, (base_a, var_a) in enumerate([(100, 200), (110, 210), (90, 190)]):
            session.add(_run(job, "baseline", "a", base_a, rep))
            session.add(_run(job, "variant", "a", var_a, rep, 10, 8))
        session.add(_run(job, "baseline", "b", 100, 0))
        session.add(_run(job, "variant", "b", 50, 0, 20, 2))


def test_report_speedup_is_the_geometric_mean_of_per_prompt_median_ratios(
        engine: Engine) -> None:
    _fill(engine)
    report = job_report(engine, "views")
    row = report[report["variant"] == "v"].iloc[0]
    assert row["speedup"] == pytest.approx(math.sqrt(2.0 * 0.5))
    assert row["baseline_tok_s"] == pytest.approx(100.0)  # median of 100, 110, 90, 100
    assert row["variant_tok_s"] == pytest.approx(195.0)  # median of 200, 210, 190, 50
    assert (row["drafted"], row["accepted"], row["runs"]) == (50, 26, 8)
    assert row["acceptance_rate"] == pytest.approx(26 / 50)
    assert row["sd_log_speedup"] == pytest.approx(math.sqrt(2) * math.log(2))
    assert row["varying_flags"] == "spec-type=ngram-simple" and row["gpu_class"] == "rtx"

    empty = report[report["variant"] == "w"].iloc[0]
    assert math.isnan(empty["speedup"]) and empty["runs"] == 0
    assert math.isnan(empty["acceptance_rate"])


def test_draft_and_verify_ms_per_token_split_the_variants_decode_time(engine: Engine) -> None:
    with Session(engine) as session, session.begin():
        job = Job(campaign=Campaign(name="views", matrix_path="m.yaml"), job_key="k" * 64,
                  model_name="m", build_name="cpu", variant_name="v", varying={}, spec={},
                  state="running")
        session.add(_run(job, "baseline", "a", 100, 0))
        # 32 tokens: 31 timed decode steps, 310 ms at 100 tok/s and 155 ms at 200 tok/s.
        for rep, (tok_s, draft_ms, accept_ms) in enumerate([(100, 31.0, 3.1),
                                                           (200, 15.5, 0.0)]):
            session.add(_run(job, "variant", "a", tok_s, rep, spec_draft_ms=draft_ms,
                             spec_accept_ms=accept_ms))
        session.add(_run(job, "variant", "a", 400, 2))  # no statistics: not counted
    [row] = job_report(engine, "views").to_dict(orient="records")
    assert row["draft_ms_per_token"] == pytest.approx((31.0 + 15.5) / 62)
    assert row["verify_ms_per_token"] == pytest.approx((310 - 31.0 - 3.1 + 155 - 15.5) / 62)


FACTS = ["baseline_tok_s", "variant_tok_s", "speedup", "sd_log_speedup", "drafted",
         "accepted", "runs", "acceptance_rate", "throttled_runs", "spilled_runs"]


def _reported(engine: Engine) -> dict[str, object]:
    return dict(job_report(engine, "views").set_index("variant").loc["v", FACTS])


def test_a_finished_job_is_reported_from_its_summary_without_reading_its_runs(
        engine: Engine) -> None:
    _fill(engine)
    from_runs = _reported(engine)
    with Session(engine) as session:
        job_id = session.scalars(select(Job.id).where(Job.variant_name == "v")).one()
    # A summary written before it kept the run facts (version 2): they come from the runs.
    with engine.begin() as connection:
        connection.execute(update(Job).where(Job.id == job_id).values(
            summary={"version": 2, "agreement": 1.0}))
    assert _reported(engine) == pytest.approx(from_runs)

    summary = JobSummary(facts=run_facts(engine, job_id)).model_dump(mode="json")
    with engine.begin() as connection:
        connection.execute(update(Job).where(Job.id == job_id).values(summary=summary))
        connection.execute(delete(Run).where(Run.job_id == job_id))
    assert _reported(engine) == pytest.approx(from_runs)


def test_group_report_and_runs_frame(engine: Engine) -> None:
    _fill(engine)
    groups = group_report(job_report(engine, None), "gpu_class").set_index("gpu_class")
    assert groups.loc["rtx", "jobs"] == 1 and groups.loc["rtx", "runs"] == 8
    assert len(runs_frame(engine, "views")) == 8


def test_views_give_the_reports_medians_and_median_speedup(engine: Engine) -> None:
    _fill(engine)
    with engine.connect() as connection:
        medians: dict[str, float] = dict(connection.execute(text(
            "SELECT arm || '/' || prompt_id, median_tok_s FROM prompt_median")).all())
        arms: dict[str, float] = dict(connection.execute(text(
            "SELECT arm, median_tok_s FROM arm_summary")).all())
        job_id, speedup, log_speedup, sd = connection.execute(text(
            "SELECT job_id, median_speedup, log_median_speedup, sd_log_speedup "
            "FROM job_speedup WHERE variant = 'v'")).one()
    assert medians == pytest.approx({"baseline/a": 100.0, "variant/a": 200.0,
                                     "baseline/b": 100.0, "variant/b": 50.0})
    row = job_report(engine, "views").set_index("variant").loc["v"]
    assert arms == pytest.approx({"baseline": row["baseline_tok_s"],
                                  "variant": row["variant_tok_s"]})
    # The view's figure is the run fact median_speedup (the report's speedup only for a
    # job without a crossover estimate, as here).
    facts = run_facts(engine, job_id)
    assert (speedup, sd) == pytest.approx((facts.median_speedup, facts.sd_log_speedup))
    assert (speedup, sd) == pytest.approx((row["speedup"], row["sd_log_speedup"]))
    assert log_speedup == pytest.approx(math.log(speedup))
