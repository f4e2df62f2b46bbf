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
from farm.store.models import Campaign, Job, Run

REPORT_COLUMNS = ["campaign", "job_key", "model", "variant", "varying_flags", "gpu_class",
                  "worker", "state", "error", "baseline_tok_s", "variant_tok_s", "speedup",
                  "sd_log_speedup", "acceptance_rate", "drafted", "accepted", "runs"]


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


_REPORT_SQL = """
SELECT c.name AS campaign, j.job_key, j.model_name AS model, j.variant_name AS variant,
       j.varying, j.gpu_class, j.lease_owner AS worker, j.state, j.error,
       b.median_tok_s AS baseline_tok_s, v.median_tok_s AS variant_tok_s,
       s.speedup, s.sd_log_speedup, s.prompts,
       COALESCE(v.drafted, 0) AS drafted, COALESCE(v.accepted, 0) AS accepted,
       COALESCE(b.runs, 0) + COALESCE(v.runs, 0) AS runs
FROM job j
JOIN campaign c ON c.id = j.campaign_id
LEFT JOIN job_speedup s ON s.job_id = j.id
LEFT JOIN arm_summary b ON b.job_id = j.id AND b.arm = 'baseline'
LEFT JOIN arm_summary v ON v.job_id = j.id AND v.arm = 'variant'
{where}
ORDER BY c.id, j.id
"""


def job_report(engine: Engine, campaign: str | None) -> pd.DataFrame:
    """One row per job (of ``campaign``, or of all campaigns), aggregated in SQL."""
    where, params = "", {}
    if campaign is not None:
        where, params = "WHERE j.campaign_id = :campaign_id", {
            "campaign_id": _campaign_id(engine, campaign)}
    with engine.connect() as connection:
        frame = pd.DataFrame(connection.execute(
            text(_REPORT_SQL.format(where=where)), params).mappings().all())
    if frame.empty:
        return pd.DataFrame(columns=REPORT_COLUMNS)
    frame["varying"] = frame["varying"].map(_load_json)
    frame["varying_flags"] = frame["varying"].map(_varying_text)
    frame["acceptance_rate"] = (frame["accepted"] / frame["drafted"].where(frame["drafted"] > 0))
    for column in ("baseline_tok_s", "variant_tok_s", "speedup", "acceptance_rate"):
        frame[column] = frame[column].astype(float)
    frame[["drafted", "accepted", "runs"]] = frame[["drafted", "accepted", "runs"]].astype(int)
    return frame[REPORT_COLUMNS]


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
