"""Tidy pandas frames of the store, and the per-job comparison the report shows.

``runs_frame`` is the entry point for notebooks: one row per run, with its job's
identity and every measurement and provenance column.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Connection, CursorResult, Engine, bindparam, select, text

from farm.errors import ConfigError
from farm.gpus import bandwidth_bound_share
from farm.matrix.spec import varying_text
from farm.report.sql import RUN_FACTS, job_report_sql, run_facts_sql

REPORT_COLUMNS = [
    "campaign", "job_key", "model", "variant", "build", "varying", "varying_flags", "gpu_class",
    "worker", "kind", "state", "error", "failure_class", "speculation", "baseline_tok_s",
    "variant_tok_s", "speedup",
    "ci_low", "ci_high", "pairs", "log_se", "df", "stop_reason", "sd_log_speedup",
    "acceptance_rate", "mean_accepted_length", "drafted", "accepted", "agreement",
    "agreement_suspect", "drift_flag", "tpot_p50_ms_baseline", "tpot_p50_ms_variant",
    "tpot_p99_ms_variant", "e2e_p50_ms_baseline", "e2e_p50_ms_variant", "e2e_p99_ms_variant",
    "throttled_runs", "spilled_runs", "gpu_name", "bandwidth_bound", "runs", "incomplete_pairs",
    "invalid_runs", "degenerate", "best_of", "best_low", "best_high", "draft_ms_per_token",
    "verify_ms_per_token"]


def latest_campaign(engine: Engine) -> str:
    """The name of the campaign created last."""
    query = text("SELECT name FROM campaign ORDER BY created_at DESC, id DESC LIMIT 1")
    with engine.connect() as connection:
        name = connection.scalar(query)
    if name is None:
        raise ConfigError("the store holds no campaign yet; run `farm run MATRIX` first")
    return str(name)


def _campaign_id(engine: Engine, name: str) -> int:
    with engine.connect() as connection:
        campaign_id = connection.scalar(text("SELECT id FROM campaign WHERE name = :name"),
                                        {"name": name})
    if campaign_id is None:
        raise ConfigError(f"no campaign named {name!r}; `farm report` without a name shows "
                          "the latest")
    return int(campaign_id)


def runs_frame(engine: Engine, campaign: str | None = None) -> pd.DataFrame:
    """Every run of ``campaign`` (default: all), one row each, with its job's identity."""
    # Here, not at the top: the ORM takes a tenth of a second to load, and reports of jobs
    # query without it.
    from farm.store.models import Campaign, Job, Run

    query = (select(Campaign.name.label("campaign"), Job.job_key,
                    Job.model_name.label("model"), Job.variant_name.label("variant"),
                    *[column for column in Run.__table__.columns])
             .join(Job, Run.job_id == Job.id).join(Campaign, Job.campaign_id == Campaign.id)
             .order_by(Run.job_id, Run.block, Run.prompt_id, Run.repetition))
    if campaign is not None:
        query = query.where(Campaign.id == _campaign_id(engine, campaign))
    with engine.connect() as connection:
        return pd.DataFrame(connection.execute(query).mappings().all())


def job_report(engine: Engine, campaign: str | None) -> pd.DataFrame:
    """One row per job (of ``campaign``, or of all campaigns): what each finished job kept
    in its summary; for the others, what SQL finds in their runs."""
    jobs, params = "1 = 1", {}
    if campaign is not None:
        jobs, params = "job.campaign_id = :campaign_id", {
            "campaign_id": _campaign_id(engine, campaign)}
    with engine.connect() as connection:
        frame = _frame(connection.execute(text(job_report_sql(jobs)), params))
        if frame.empty:
            return pd.DataFrame(columns=REPORT_COLUMNS)
        summaries = _summaries(frame)
        lacking = summaries["runs"].isna() & frame["has_runs"].astype(bool)
        facts = _run_facts(connection, engine.dialect.name,
                           frame.loc[lacking, "job_id"].tolist())
    frame["varying"] = frame["varying"].map(_load_json)
    frame["varying_flags"] = frame["varying"].map(varying_text)
    frame = _with_summaries(frame, summaries, facts)
    frame["bandwidth_bound"] = [
        bandwidth_bound_share(float(tok_s), gpu, int(size))
        if pd.notna(tok_s) and pd.notna(size) else None
        for tok_s, gpu, size in zip(frame["variant_tok_s"], frame["gpu_name"],
                                    frame["model_size"], strict=True)]
    frame["acceptance_rate"] = (frame["accepted"] / frame["drafted"].where(frame["drafted"] > 0))
    # A variant that asked for speculation and drafted nothing is not a speedup to quote.
    frame.loc[frame["speculation"] == "none", "speedup"] = float("nan")
    frame = _with_best_of(frame)
    return frame[REPORT_COLUMNS]


def run_facts(engine: Engine, job_id: int) -> dict[str, Any]:
    """The ``RUN_FACTS`` of one job from its runs, JSON-friendly (what its summary keeps)."""
    query = text(run_facts_sql("job.id = :job_id", engine.dialect.name))
    with engine.connect() as connection:
        row = connection.execute(query, {"job_id": job_id}).mappings().one()
    return {name: row[name] for name in RUN_FACTS}


# Job ids bound per run-facts query: twice this stays under either database's limit on
# bound parameters (32,766 on SQLite, 65,535 on PostgreSQL).
_IDS_PER_QUERY = 10_000


def _run_facts(connection: Connection, dialect: str, job_ids: list[int]) -> pd.DataFrame:
    """The ``RUN_FACTS`` of ``job_ids`` from their runs, indexed by job id."""
    query = text(run_facts_sql("job.id IN :ids", dialect)).bindparams(
        bindparam("ids", expanding=True))
    # The ids are listed, not selected by a condition, so the planner knows how many jobs
    # it aggregates: an estimate of one job for thousands turns its joins quadratic.
    parts = [_frame(connection.execute(query, {"ids": job_ids[start:start + _IDS_PER_QUERY]}))
             for start in range(0, len(job_ids), _IDS_PER_QUERY)]
    if not parts:
        return pd.DataFrame(columns=RUN_FACTS, index=pd.Index([], name="job_id"))
    return pd.concat(parts).set_index("job_id")


def _frame(result: CursorResult[Any]) -> pd.DataFrame:
    return pd.DataFrame(result.all(), columns=list(result.keys()))


SUMMARY_COLUMNS = ("kind", "ci_low", "ci_high", "agreement", "agreement_suspect", "drift_flag",
                   "incomplete_pairs", "invalid_runs", "degenerate",
                   "mean_accepted_length", "tpot_p50_ms_baseline", "tpot_p50_ms_variant",
                   "tpot_p99_ms_variant", "e2e_p50_ms_baseline", "e2e_p50_ms_variant",
                   "e2e_p99_ms_variant")


def _summaries(frame: pd.DataFrame) -> pd.DataFrame:
    """The jobs' summaries as columns (missing values where a job has none)."""
    parsed = [_load_json(value) if value else {} for value in frame["summary"]]
    return pd.DataFrame.from_records(parsed, index=frame.index,
                                     columns=["speedup", *SUMMARY_COLUMNS, *RUN_FACTS])


def _with_summaries(frame: pd.DataFrame, summaries: pd.DataFrame,
                    facts: pd.DataFrame) -> pd.DataFrame:
    """Prefer the statistics written when a job finished (speedup over block pairs, its
    interval, agreement, drift, and the run facts); the other jobs get the ``facts`` of
    their runs (their speedup the geometric mean of per-prompt medians, nothing counted
    for a job without runs) and no interval."""
    stored = summaries["runs"].notna()
    found = facts.reindex(frame["job_id"]).set_axis(frame.index)
    for column in RUN_FACTS:
        frame[column] = summaries[column].where(stored, found[column])
    pair_speedup = summaries["speedup"].astype(float)
    frame["speedup"] = pair_speedup.where(pair_speedup.notna(), frame["median_speedup"])
    for column in SUMMARY_COLUMNS:
        frame[column] = summaries[column]
    # Jobs that have not finished (or finished before kinds were kept) read as variants.
    frame["kind"] = frame["kind"].fillna("variant")
    for column in ("speedup", "ci_low", "ci_high", "agreement", "mean_accepted_length",
                   "baseline_tok_s", "variant_tok_s", "sd_log_speedup", "draft_ms_per_token",
                   "verify_ms_per_token"):
        frame[column] = frame[column].astype(float)
    for column in ("drafted", "accepted", "runs", "throttled_runs", "spilled_runs"):
        frame[column] = frame[column].astype(float).fillna(0).astype(int)
    frame["pairs"] = frame["pairs"].astype("Int64")
    # A summary without a GPU name reads back as NaN; the name is text or nothing.
    frame["gpu_name"] = frame["gpu_name"].astype(object).where(frame["gpu_name"].notna(), None)
    return frame


def _with_best_of(frame: pd.DataFrame) -> pd.DataFrame:
    """Mark the fastest of the m >= 2 variants of each campaign x model x GPU class: the row a
    reader picks, so it gets a simultaneous interval (``farm.studentt.best_of_interval``).
    Control (A/A) and synthetic-acceptance jobs are not candidates: neither is a setting
    to pick."""
    from farm.studentt import best_of_interval

    keys = ["campaign", "model", "gpu_class"]
    best = pd.DataFrame({"best_of": pd.Series(pd.NA, index=frame.index, dtype="Int64"),
                         "best_low": float("nan"), "best_high": float("nan")})
    measured = frame.loc[frame["speedup"].notna() & frame["log_se"].notna()
                         & (frame["kind"] == "variant"), [*keys, "speedup", "log_se", "df"]]
    variants = measured.groupby(keys, dropna=False)["speedup"].transform("size")
    measured = measured[variants >= 2]
    for index in measured.groupby(keys, dropna=False)["speedup"].idxmax():
        job = measured.loc[index]
        low, high = best_of_interval(math.log(float(job["speedup"])), float(job["log_se"]),
                                     int(job["df"]), int(variants[index]))
        best.loc[index] = [variants[index], low, high]
    return frame.assign(**best)


def _load_json(value: Any) -> dict[str, Any]:
    # Raw SQL returns JSON columns as text on SQLite and as objects on PostgreSQL.
    return json.loads(value) if isinstance(value, str) else dict(value)


def _pooled(frame: pd.DataFrame, keys: list[str], estimate: str) -> pd.DataFrame:
    """Per group of ``keys``: the typical speedup with its random-effects interval and the
    between-job spread tau (``farm.stats.pool_jobs``), from each job's ``estimate``, the
    standard error of its log (``log_se``) and its degrees of freedom (``df``)."""
    from farm.stats import pool_jobs

    rows = []
    for key, jobs in frame.groupby(keys, dropna=False):
        dfs = [int(n) if pd.notna(n) else 0 for n in jobs["df"]]
        pooled = pool_jobs(np.log(jobs[estimate].astype(float)),
                           jobs["log_se"].astype(float), dfs)
        rows.append({**dict(zip(keys, key, strict=True)), "jobs": len(jobs),
                     "speedup": pooled.estimate, "low": pooled.low, "high": pooled.high,
                     "tau": pooled.tau})
    return pd.DataFrame(rows, columns=[*keys, "jobs", "speedup", "low", "high", "tau"])


def group_report(report: pd.DataFrame, by: str) -> pd.DataFrame:
    """Jobs grouped by a column: the typical speedup with its random-effects interval and
    between-job spread (tau), the range, counters, runs. Kinds of job never pool together:
    an A/A control or a synthetic arm is a group of its own beside the variants."""
    keys = [by] if by == "kind" else [by, "kind"]
    grouped = report.groupby(keys, dropna=False)
    totals = pd.DataFrame({
        "min_speedup": grouped["speedup"].min(),
        "max_speedup": grouped["speedup"].max(),
        "drafted": grouped["drafted"].sum(),
        "accepted": grouped["accepted"].sum(),
        "runs": grouped["runs"].sum(),
    }).reset_index()
    return _pooled(report, keys, "speedup").merge(totals, on=keys)


def with_design_columns(report: pd.DataFrame) -> pd.DataFrame:
    """The report plus what plots sweep over: the spec type and the draft length."""
    spec_type = report["varying"].map(lambda v: v.get("spec-type") or "")
    draft = report["varying"].map(lambda v: v.get("spec-draft-n-max"))
    return report.assign(spec_type=spec_type,
                         draft_n_max=pd.to_numeric(draft, errors="coerce"))


def category_report(runs: pd.DataFrame, report: pd.DataFrame) -> pd.DataFrame:
    """Per job and prompt category: speedup with its interval over block pairs."""
    from farm.stats import speedup_by

    columns = ["job_key", "model", "variant", "category", "estimate", "low", "high", "pairs",
               "log_se", "df"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    names = {str(row["job_key"]): (row["model"], row["variant"])
             for row in report.to_dict(orient="records")}
    parts = []
    for job_key, job_runs in runs.groupby("job_key"):
        model, variant = names[str(job_key)]
        by = speedup_by(job_runs, "prompt_category").rename(
            columns={"prompt_category": "category"})
        parts.append(by.assign(job_key=job_key, model=model, variant=variant))
    return pd.concat(parts, ignore_index=True)[columns]


def category_summary(categories: pd.DataFrame) -> pd.DataFrame:
    """Per variant and category: the typical speedup of the jobs with its random-effects
    interval and between-job spread (tau), from each job's log standard error and df."""
    return _pooled(categories, ["variant", "category"], "estimate")
