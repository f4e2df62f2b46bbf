"""Tidy pandas frames of the store, and the per-job comparison the report shows.

``runs_frame`` is the entry point for notebooks: one row per run, with its job's
identity and every measurement and provenance column.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select, text

from farm.errors import ConfigError
from farm.gpus import bandwidth_bound_share
from farm.store.models import Campaign, Job, Run

REPORT_COLUMNS = [
    "campaign", "job_key", "model", "variant", "varying", "varying_flags", "gpu_class", "worker",
    "state", "error", "failure_class", "speculation", "baseline_tok_s", "variant_tok_s",
    "speedup", "ci_low", "ci_high", "pairs", "stop_reason", "sd_log_speedup", "acceptance_rate",
    "mean_accepted_length", "drafted", "accepted", "agreement", "agreement_suspect",
    "drift_flag", "tpot_p50_ms_baseline", "tpot_p50_ms_variant", "tpot_p99_ms_variant",
    "e2e_p50_ms_baseline", "e2e_p50_ms_variant", "e2e_p99_ms_variant", "throttled_runs",
    "spilled_runs", "gpu_name", "bandwidth_bound", "runs"]


def latest_campaign(engine: Engine) -> str:
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


def _varying_text(varying: dict[str, str | None]) -> str:
    return " ".join(f"{k}={'-' if v is None else v}" for k, v in varying.items())


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


# Runs are narrowed to the campaign first, so one campaign's report costs its own runs,
# not the whole store's. Medians: percentile_cont on PostgreSQL; window ranks on SQLite.
_MEDIANS = {
    "postgresql": """
prompt_med AS (
    SELECT job_id, arm, prompt_id,
           percentile_cont(0.5) WITHIN GROUP (ORDER BY decode_tok_s) AS med
    FROM r GROUP BY job_id, arm, prompt_id),
arm_med AS (
    SELECT job_id, arm, percentile_cont(0.5) WITHIN GROUP (ORDER BY decode_tok_s) AS med
    FROM r GROUP BY job_id, arm),""",
    "sqlite": """
ranked_prompt AS (
    SELECT job_id, arm, prompt_id, decode_tok_s,
           ROW_NUMBER() OVER (PARTITION BY job_id, arm, prompt_id ORDER BY decode_tok_s) AS rn,
           COUNT(*) OVER (PARTITION BY job_id, arm, prompt_id) AS n
    FROM r),
prompt_med AS (
    SELECT job_id, arm, prompt_id, AVG(decode_tok_s) AS med FROM ranked_prompt
    WHERE rn IN ((n + 1) / 2, (n + 2) / 2) GROUP BY job_id, arm, prompt_id),
ranked_arm AS (
    SELECT job_id, arm, decode_tok_s,
           ROW_NUMBER() OVER (PARTITION BY job_id, arm ORDER BY decode_tok_s) AS rn,
           COUNT(*) OVER (PARTITION BY job_id, arm) AS n
    FROM r),
arm_med AS (
    SELECT job_id, arm, AVG(decode_tok_s) AS med FROM ranked_arm
    WHERE rn IN ((n + 1) / 2, (n + 2) / 2) GROUP BY job_id, arm),""",
}

_REPORT_SQL = """
WITH r AS (
    SELECT run.job_id, run.arm, run.prompt_id, run.decode_tok_s, run.spec_drafted,
           run.spec_accepted, run.gpu_name, run.model_size, run.throttled,
           run.weights_spilled
    FROM run JOIN job ON job.id = run.job_id {where}),
{medians}
arm_counts AS (
    SELECT job_id, arm, COUNT(*) AS runs, SUM(spec_drafted) AS drafted,
           SUM(spec_accepted) AS accepted, MAX(gpu_name) AS gpu_name,
           MAX(model_size) AS model_size,
           SUM(CASE WHEN throttled THEN 1 ELSE 0 END) AS throttled_runs,
           SUM(CASE WHEN weights_spilled THEN 1 ELSE 0 END) AS spilled_runs
    FROM r GROUP BY job_id, arm),
ratios AS (
    SELECT b.job_id, LN(v.med / b.med) AS log_ratio
    FROM prompt_med b
    JOIN prompt_med v ON v.job_id = b.job_id AND v.prompt_id = b.prompt_id
    WHERE b.arm = 'baseline' AND v.arm = 'variant' AND b.med > 0 AND v.med > 0),
stats AS (
    SELECT job_id, COUNT(*) AS prompts, AVG(log_ratio) AS mean_log,
           SUM(log_ratio * log_ratio) AS sum_sq
    FROM ratios GROUP BY job_id)
SELECT c.name AS campaign, job.job_key, job.model_name AS model,
       job.variant_name AS variant, job.varying, job.gpu_class, job.lease_owner AS worker,
       job.state, job.error, job.failure_class, job.speculation, job.summary,
       job.pairs, job.stop_reason,
       bm.med AS baseline_tok_s, vm.med AS variant_tok_s, EXP(s.mean_log) AS speedup,
       CASE WHEN s.prompts > 1 AND s.sum_sq - s.prompts * s.mean_log * s.mean_log > 0
            THEN SQRT((s.sum_sq - s.prompts * s.mean_log * s.mean_log) / (s.prompts - 1))
       END AS sd_log_speedup,
       COALESCE(vc.drafted, 0) AS drafted, COALESCE(vc.accepted, 0) AS accepted,
       COALESCE(bc.runs, 0) + COALESCE(vc.runs, 0) AS runs, bc.gpu_name, bc.model_size,
       COALESCE(bc.throttled_runs, 0) + COALESCE(vc.throttled_runs, 0) AS throttled_runs,
       COALESCE(bc.spilled_runs, 0) + COALESCE(vc.spilled_runs, 0) AS spilled_runs
FROM job
JOIN campaign c ON c.id = job.campaign_id
LEFT JOIN stats s ON s.job_id = job.id
LEFT JOIN arm_med bm ON bm.job_id = job.id AND bm.arm = 'baseline'
LEFT JOIN arm_med vm ON vm.job_id = job.id AND vm.arm = 'variant'
LEFT JOIN arm_counts bc ON bc.job_id = job.id AND bc.arm = 'baseline'
LEFT JOIN arm_counts vc ON vc.job_id = job.id AND vc.arm = 'variant'
{where}
ORDER BY c.id, job.id
"""


def job_report(engine: Engine, campaign: str | None) -> pd.DataFrame:
    """One row per job (of ``campaign``, or of all campaigns), aggregated in SQL."""
    where, params = "", {}
    if campaign is not None:
        where, params = "WHERE job.campaign_id = :campaign_id", {
            "campaign_id": _campaign_id(engine, campaign)}
    medians = _MEDIANS["postgresql" if engine.dialect.name == "postgresql" else "sqlite"]
    sql = text(_REPORT_SQL.format(where=where, medians=medians))
    with engine.connect() as connection:
        frame = pd.DataFrame(connection.execute(sql, params).mappings().all())
    if frame.empty:
        return pd.DataFrame(columns=REPORT_COLUMNS)
    frame["varying"] = frame["varying"].map(_load_json)
    frame["varying_flags"] = frame["varying"].map(_varying_text)
    frame = _with_summaries(frame)
    frame["bandwidth_bound"] = [
        bandwidth_bound_share(float(tok_s), gpu, int(size))
        if pd.notna(tok_s) and pd.notna(size) else None
        for tok_s, gpu, size in zip(frame["variant_tok_s"], frame["gpu_name"],
                                    frame["model_size"], strict=True)]
    frame["acceptance_rate"] = (frame["accepted"] / frame["drafted"].where(frame["drafted"] > 0))
    # A variant that asked for speculation and drafted nothing is not a speedup to quote.
    frame.loc[frame["speculation"] == "none", "speedup"] = float("nan")
    for column in ("baseline_tok_s", "variant_tok_s", "speedup", "acceptance_rate"):
        frame[column] = frame[column].astype(float)
    frame[["drafted", "accepted", "runs"]] = frame[["drafted", "accepted", "runs"]].astype(int)
    return frame[REPORT_COLUMNS]


SUMMARY_COLUMNS = ("ci_low", "ci_high", "agreement", "agreement_suspect", "drift_flag",
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


def _load_json(value: Any) -> dict[str, Any]:
    # Raw SQL returns JSON columns as text on SQLite and as objects on PostgreSQL.
    return json.loads(value) if isinstance(value, str) else dict(value)


def group_report(report: pd.DataFrame, by: str) -> pd.DataFrame:
    """Jobs grouped by a column: geometric-mean speedup, range, counters, runs."""
    grouped = report.assign(log_speedup=np.log(report["speedup"])).groupby(by, dropna=False)
    return pd.DataFrame({
        "jobs": grouped.size(),
        "speedup": np.exp(grouped["log_speedup"].mean()),
        "min_speedup": grouped["speedup"].min(),
        "max_speedup": grouped["speedup"].max(),
        "drafted": grouped["drafted"].sum(),
        "accepted": grouped["accepted"].sum(),
        "runs": grouped["runs"].sum(),
    }).reset_index()


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
    """Per variant and category: geometric mean of the jobs' category speedups."""
    if categories.empty:
        return pd.DataFrame(columns=["variant", "category", "jobs", "speedup", "low", "high"])
    logged = categories.assign(log_estimate=np.log(categories["estimate"]),
                               log_low=np.log(categories["low"]),
                               log_high=np.log(categories["high"]))
    grouped = logged.groupby(["variant", "category"])
    return pd.DataFrame({
        "jobs": grouped.size(),
        "speedup": np.exp(grouped["log_estimate"].mean()),
        "low": np.exp(grouped["log_low"].mean()),
        "high": np.exp(grouped["log_high"].mean()),
    }).reset_index()
