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
from sqlalchemy import Engine, select, text

from farm.errors import ConfigError
from farm.gpus import bandwidth_bound_share
from farm.matrix.spec import varying_text
from farm.report.sql import job_report_sql
from farm.store.models import Campaign, Job, Run

REPORT_COLUMNS = [
    "campaign", "job_key", "model", "variant", "varying", "varying_flags", "gpu_class", "worker",
    "state", "error", "failure_class", "speculation", "baseline_tok_s", "variant_tok_s", "speedup",
    "ci_low", "ci_high", "pairs", "log_se", "df", "stop_reason", "sd_log_speedup",
    "acceptance_rate", "mean_accepted_length", "drafted", "accepted", "agreement",
    "agreement_suspect", "drift_flag", "tpot_p50_ms_baseline", "tpot_p50_ms_variant",
    "tpot_p99_ms_variant", "e2e_p50_ms_baseline", "e2e_p50_ms_variant", "e2e_p99_ms_variant",
    "throttled_runs", "spilled_runs", "gpu_name", "bandwidth_bound", "runs", "incomplete_pairs",
    "invalid_runs", "degenerate", "best_of", "best_low", "best_high"]


def latest_campaign(engine: Engine) -> str:
    """The name of the campaign created last."""
    query = select(Campaign.name).order_by(Campaign.created_at.desc(), Campaign.id.desc())
    with engine.connect() as connection:
        name = connection.scalar(query.limit(1))
    if name is None:
        raise ConfigError("the store holds no campaign yet; run `farm run MATRIX` first")
    return str(name)


def _campaign_id(engine: Engine, name: str) -> int:
    with engine.connect() as connection:
        campaign_id = connection.scalar(select(Campaign.id).where(Campaign.name == name))
    if campaign_id is None:
        raise ConfigError(f"no campaign named {name!r}; `farm report` without a name shows "
                          "the latest")
    return int(campaign_id)


def runs_frame(engine: Engine, campaign: str | None = None) -> pd.DataFrame:
    """Every run of ``campaign`` (default: all), one row each, with its job's identity."""
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
    """One row per job (of ``campaign``, or of all campaigns), aggregated in SQL."""
    where, params = "", {}
    if campaign is not None:
        where, params = "WHERE job.campaign_id = :campaign_id", {
            "campaign_id": _campaign_id(engine, campaign)}
    with engine.connect() as connection:
        query = text(job_report_sql(where, engine.dialect.name))
        frame = pd.DataFrame(connection.execute(query, params).mappings().all())
    if frame.empty:
        return pd.DataFrame(columns=REPORT_COLUMNS)
    frame["varying"] = frame["varying"].map(_load_json)
    frame["varying_flags"] = frame["varying"].map(varying_text)
    frame = _with_summaries(frame)
    frame["bandwidth_bound"] = [
        bandwidth_bound_share(float(tok_s), gpu, int(size))
        if pd.notna(tok_s) and pd.notna(size) else None
        for tok_s, gpu, size in zip(frame["variant_tok_s"], frame["gpu_name"],
                                    frame["model_size"], strict=True)]
    frame["acceptance_rate"] = (frame["accepted"] / frame["drafted"].where(frame["drafted"] > 0))
    # A variant that asked for speculation and drafted nothing is not a speedup to quote.
    frame.loc[frame["speculation"] == "none", "speedup"] = float("nan")
    frame = _with_best_of(frame)
    for column in ("baseline_tok_s", "variant_tok_s", "speedup", "acceptance_rate"):
        frame[column] = frame[column].astype(float)
    frame[["drafted", "accepted", "runs"]] = frame[["drafted", "accepted", "runs"]].astype(int)
    return frame[REPORT_COLUMNS]


SUMMARY_COLUMNS = ("ci_low", "ci_high", "agreement", "agreement_suspect", "drift_flag",
                   "incomplete_pairs", "invalid_runs", "degenerate",
                   "mean_accepted_length", "tpot_p50_ms_baseline", "tpot_p50_ms_variant",
                   "tpot_p99_ms_variant", "e2e_p50_ms_baseline", "e2e_p50_ms_variant",
                   "e2e_p99_ms_variant")


def _with_summaries(frame: pd.DataFrame) -> pd.DataFrame:
    """Prefer the statistics written when a job finished (speedup over block pairs, its
    interval, agreement, drift); unfinished jobs keep the SQL estimate and no interval."""
    parsed = [_load_json(value) if value else {} for value in frame["summary"]]
    summaries = pd.DataFrame.from_records(parsed, index=frame.index,
                                          columns=["speedup", *SUMMARY_COLUMNS])
    pair_speedup = summaries["speedup"].astype(float)
    frame["speedup"] = pair_speedup.where(pair_speedup.notna(), frame["speedup"])
    for column in SUMMARY_COLUMNS:
        frame[column] = summaries[column]
    for column in ("ci_low", "ci_high", "agreement", "mean_accepted_length"):
        frame[column] = frame[column].astype(float)
    frame["pairs"] = frame["pairs"].astype("Int64")
    return frame


def _with_best_of(frame: pd.DataFrame) -> pd.DataFrame:
    """Mark the fastest of the m >= 2 variants of each campaign x model x GPU class: the row a
    reader picks, so it gets a simultaneous interval (``farm.stats.best_of_interval``)."""
    from farm.stats import best_of_interval

    frame = frame.assign(best_of=pd.Series(pd.NA, index=frame.index, dtype="Int64"),
                         best_low=float("nan"), best_high=float("nan"))
    for _, jobs in frame.groupby(["campaign", "model", "gpu_class"], dropna=False):
        measured = jobs[jobs["speedup"].notna() & jobs["log_se"].notna()]
        if len(measured) < 2:
            continue
        speedups = measured["speedup"].to_numpy(dtype=float)
        best = int(np.argmax(speedups))
        low, high = best_of_interval(math.log(speedups[best]),
                                     float(measured["log_se"].to_numpy(dtype=float)[best]),
                                     int(measured["df"].to_numpy(dtype=float)[best]),
                                     len(measured))
        frame.loc[measured.index[best], ["best_of", "best_low", "best_high"]] = [
            len(measured), low, high]
    return frame


def _load_json(value: Any) -> dict[str, Any]:
    # Raw SQL returns JSON columns as text on SQLite and as objects on PostgreSQL.
    return json.loads(value) if isinstance(value, str) else dict(value)


def _pooled(frame: pd.DataFrame, keys: list[str], estimate: str, low: str,
            high: str) -> pd.DataFrame:
    """Per group of ``keys``: the typical speedup with its random-effects interval and the
    between-job spread tau (``farm.stats.pool_jobs``), from each job's estimate and
    paired-t interval over its ``pairs``."""
    from farm.stats import log_standard_error, pool_jobs

    rows = []
    for key, jobs in frame.groupby(keys, dropna=False):
        pairs = [int(n) if pd.notna(n) else 0 for n in jobs["pairs"]]
        errors = [log_standard_error(float(lo), float(hi), n)
                  for lo, hi, n in zip(jobs[low], jobs[high], pairs, strict=True)]
        pooled = pool_jobs(np.log(jobs[estimate].astype(float)), errors,
                           [n - 1 for n in pairs])
        rows.append({**dict(zip(keys, key, strict=True)), "jobs": len(jobs),
                     "speedup": pooled.estimate, "low": pooled.low, "high": pooled.high,
                     "tau": pooled.tau})
    return pd.DataFrame(rows, columns=[*keys, "jobs", "speedup", "low", "high", "tau"])


def group_report(report: pd.DataFrame, by: str) -> pd.DataFrame:
    """Jobs grouped by a column: the typical speedup with its random-effects interval and
    between-job spread (tau), the range, counters, runs."""
    grouped = report.groupby(by, dropna=False)
    totals = pd.DataFrame({
        "min_speedup": grouped["speedup"].min(),
        "max_speedup": grouped["speedup"].max(),
        "drafted": grouped["drafted"].sum(),
        "accepted": grouped["accepted"].sum(),
        "runs": grouped["runs"].sum(),
    }).reset_index()
    return _pooled(report, [by], "speedup", "ci_low", "ci_high").merge(totals, on=by)


def with_design_columns(report: pd.DataFrame) -> pd.DataFrame:
    """The report plus what plots sweep over: the spec type and the draft length."""
    spec_type = report["varying"].map(lambda v: v.get("spec-type") or "")
    draft = report["varying"].map(lambda v: v.get("spec-draft-n-max"))
    return report.assign(spec_type=spec_type,
                         draft_n_max=pd.to_numeric(draft, errors="coerce"))


def category_report(runs: pd.DataFrame, report: pd.DataFrame) -> pd.DataFrame:
    """Per job and prompt category: speedup with its interval over block pairs."""
    from farm.stats import speedup_by

    columns = ["job_key", "model", "variant", "category", "estimate", "low", "high", "pairs"]
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
    interval and between-job spread (tau)."""
    return _pooled(categories, ["variant", "category"], "estimate", "low", "high")
