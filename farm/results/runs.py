"""Runs as the tidy frame (``farm.stats.frame.tidy_runs``): a campaign's for reports and
notebooks (``runs_frame``), one job's for its summary (``job_runs``) and its streams.

Importing it loads no pandas (``farm report --format json`` imports it and prints rows):
the functions do."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, Engine, case, func, select

from farm.run_metrics import RUN_METRICS
from farm.store.campaigns import campaign_id

if TYPE_CHECKING:
    import pandas as pd

    from farm.matrix.spec import JobSpec
    from farm.stats.design import Design

# What a job's statistics read of each run (farm.stats): its place in the design, the
# prompt, the metrics they read (farm.run_metrics: the decode speed by the server's and by
# the client's clock, the speculative counters, the node's other work...), the acceptance
# per position, the text and its tokens, the streams; its start, for its order in a block.
STATS_COLUMNS = ("job_id", "arm", "block", "pair", "position", "prompt_id", "prompt_category",
                 "repetition",
                 *(metric.name for metric in RUN_METRICS if metric.statistics),
                 "spec_accepted_per_pos", "text", "tokens", "concurrency", "started_at")
# The latest earlier jobs of a job's machine and model that its drift test looks through
# for ``farm.stats.drift.EARLIER_MAX`` alike (the same prompts and repetitions), and what
# it reads of their runs.
EARLIER_LOOKED = 64
DRIFT_COLUMNS = ("job_id", "arm", "block", "position", "prompt_id", "repetition",
                 "decode_tok_s", "client_decode_tok_s")


def _runs(engine: Engine, columns: Sequence[ColumnElement[Any]],
          where: ColumnElement[bool] | None) -> pd.DataFrame:
    """The tidy frame of the runs meeting ``where``, in job, block, prompt, repetition order."""
    # Here, not at the top: the ORM takes a tenth of a second to load, and reports of jobs
    # query without it.
    from farm.stats.frame import tidy_runs
    from farm.store.models import Campaign, Job, Run

    query = (select(*columns).join(Job, Run.job_id == Job.id)
             .join(Campaign, Job.campaign_id == Campaign.id)
             .order_by(Run.job_id, Run.block, Run.prompt_id, Run.repetition))
    if where is not None:
        query = query.where(where)
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    return tidy_runs(rows, [str(column.key) for column in columns] if rows else [])


def runs_frame(engine: Engine, campaign: str | None = None) -> pd.DataFrame:
    """Every run of ``campaign`` (default: all), one row each, with its job's identity and
    kind ("variant", "control" or "synthetic")."""
    from farm.store.models import Campaign, Job, Run

    # In the order of their names: the order exports have always had.
    columns = sorted([Campaign.name.label("campaign"), Job.job_key, Job.model_name.label("model"),
                      Job.variant_name.label("variant"), *Run.__table__.columns],
                     key=lambda column: str(column.key))
    jobs = select(Job.id, Job.summary, Job.spec)
    where = None
    if campaign is not None:
        chosen = campaign_id(engine, campaign)
        where, jobs = Campaign.id == chosen, jobs.where(Job.campaign_id == chosen)
    runs = _runs(engine, columns, where)
    with engine.connect() as connection:
        kinds = {job_id: _job_kind(summary, spec)
                 for job_id, summary, spec in connection.execute(jobs)}
    return runs.assign(kind=runs["job_id"].map(kinds)) if not runs.empty else runs


def job_designs(engine: Engine, campaign: str | None = None) -> dict[str, Design | None]:
    """Each job's design by job key (``designs_of``)."""
    return designs_of(job_specs(engine, campaign))


def designs_of(specs: Mapping[str, JobSpec | None]) -> dict[str, Design | None]:
    """Each job's design by job key (``JobSpec.design``; None for a spec this farm cannot
    read, whose interval is then made as a fixed design's): what its per-category intervals
    are made with, as its own was (``farm.stats.speedup.job_estimate``)."""
    return {key: None if spec is None else spec.design for key, spec in specs.items()}


def draft_lengths_of(specs: Mapping[str, JobSpec | None]) -> dict[str, int]:
    """The draft length each job's variant ran with, by job key, where it has one: its
    length flag, wherever the matrix set it, else the flag's default
    (``farm.matrix.flags.arm_draft_length``)."""
    from farm.matrix.flags import arm_draft_length

    lengths = {key: arm_draft_length(dict(spec.variant.flags))
               for key, spec in specs.items() if spec is not None}
    return {key: length for key, length in lengths.items() if length is not None}


def job_specs(engine: Engine, campaign: str | None) -> dict[str, JobSpec | None]:
    """Each job's spec by job key; None for one this farm cannot read."""
    from pydantic import ValidationError

    from farm.matrix.spec import JobSpec
    from farm.store.models import Job

    jobs = select(Job.job_key, Job.spec)
    if campaign is not None:
        jobs = jobs.where(Job.campaign_id == campaign_id(engine, campaign))
    specs: dict[str, JobSpec | None] = {}
    with engine.connect() as connection:
        for job_key, spec in connection.execute(jobs):
            try:
                specs[str(job_key)] = JobSpec.model_validate(spec)
            except ValidationError:
                specs[str(job_key)] = None
    return specs


def job_runs(engine: Engine, job_id: int) -> pd.DataFrame:
    """One job's runs, the columns its statistics read (``STATS_COLUMNS``)."""
    from farm.stats.frame import tidy_runs
    from farm.store.models import Run

    frame = _runs(engine, [getattr(Run, name) for name in STATS_COLUMNS], Run.job_id == job_id)
    return frame if not frame.empty else tidy_runs([], STATS_COLUMNS)


def earlier_runs(engine: Engine, job_id: int) -> list[pd.DataFrame]:
    """The runs (``DRIFT_COLUMNS``) of the latest jobs (``EARLIER_LOOKED`` at most) of job
    ``job_id``'s machine and model that it could be compared with, latest first: each
    measured on its first run's host and GPU with its model file, every run of it begun
    before the job's first (a job retried or summarised again reads the same ones). A job's
    drift test is made against those of them that ran its prompts and repetitions
    (``farm.stats.drift``)."""
    from farm.store.models import Run

    with engine.connect() as connection:
        first = connection.execute(
            select(Run.host, Run.gpu_name, Run.model_sha256, Run.started_at)
            .where(Run.job_id == job_id).order_by(Run.started_at).limit(1)).first()
        if first is None:
            return []
        host, gpu, model, began = first
        ended = func.max(Run.started_at)
        latest = connection.scalars(
            select(Run.job_id)
            .where(Run.host == host, Run.model_sha256 == model, Run.job_id != job_id,
                   Run.gpu_name.is_not_distinct_from(gpu))
            .group_by(Run.job_id).having(ended < began)
            .order_by(ended.desc(), Run.job_id.desc()).limit(EARLIER_LOOKED)).all()
    if not latest:
        return []
    runs = _runs(engine, [getattr(Run, name) for name in DRIFT_COLUMNS],
                 Run.job_id.in_(latest))
    return [runs[runs["job_id"] == earlier].reset_index(drop=True) for earlier in latest]


def job_streams(engine: Engine, job_id: int) -> pd.DataFrame:
    """One job's simultaneous streams (``farm.stats.traffic.slot_acceptance``'s frame)."""
    from farm.stats.frame import tidy_runs
    from farm.store.models import Run, Stream

    query = (select(Run.arm, Run.block, Run.prompt_id, Run.repetition, Stream.slot,
                    Stream.__table__.c.draft_n, Stream.__table__.c.draft_accepted)
             .join(Stream, Stream.run_id == Run.id).where(Run.job_id == job_id))
    with engine.connect() as connection:
        rows = connection.execute(query).mappings().all()
    return tidy_runs(rows, list(query.selected_columns.keys()))


def _job_kind(summary: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> str:
    """What a job measures (``JobSpec.kind``): "variant", "control" or "synthetic", as its
    summary kept it, else from its spec. A spec this farm cannot read is a variant's, as
    reports read a job without a kind."""
    from pydantic import ValidationError

    from farm.matrix.spec import JobSpec

    if summary and summary.get("kind"):
        return str(summary["kind"])
    try:
        return JobSpec.model_validate(spec).kind
    except ValidationError:
        return "variant"


@dataclass(frozen=True)
class ArmCost:
    """What the store measured of a build on a model: a run's mean end-to-end seconds and a
    block's mean server start and warm-up seconds (None before the store kept them)."""

    run_s: float
    start_s: float | None


def arm_costs(engine: Engine) -> dict[tuple[str, str], ArmCost]:
    """``ArmCost`` by build name and model file name, over every run the store holds (what a
    dry run's time estimate is made from). A block's start and warm-up are on one of its
    runs (``server_start_s``, ``warmup_s``)."""
    from farm.store.models import Run

    metric = Run.__table__.c
    started = func.avg(case((metric.server_start_s.is_not(None),
                             metric.server_start_s + func.coalesce(metric.warmup_s, 0.0))))
    query = (select(Run.build_name, Run.model_file, func.avg(metric.e2e_ms), started)
             .group_by(Run.build_name, Run.model_file))
    with engine.connect() as connection:
        rows = connection.execute(query).all()
    return {(build, Path(model).name): ArmCost(float(e2e_ms) / 1000.0,
                                               None if start is None else float(start))
            for build, model, e2e_ms, start in rows if e2e_ms is not None}
