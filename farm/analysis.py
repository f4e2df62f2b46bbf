"""Tidy pandas frames of the store, and the per-job comparison the report shows.

``runs_frame`` is the entry point for notebooks: one row per run, with its job's
identity and every measurement and provenance column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sqlalchemy import Engine, select

from farm.errors import ConfigError
from farm.store.models import Campaign, Job, Run

REPORT_COLUMNS = ["campaign", "job_key", "model", "variant", "varying_flags", "state",
                  "baseline_tok_s", "variant_tok_s", "speedup", "acceptance_rate",
                  "drafted", "accepted", "runs"]


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


def jobs_frame(engine: Engine, campaign: str) -> pd.DataFrame:
    query = (select(Campaign.name.label("campaign"), Job.id.label("job_id"), Job.job_key,
                    Job.model_name.label("model"), Job.variant_name.label("variant"),
                    Job.varying, Job.state, Job.error)
             .join(Campaign).where(Job.campaign_id == _campaign_id(engine, campaign))
             .order_by(Job.id))
    with engine.connect() as connection:
        frame = pd.DataFrame(connection.execute(query).mappings().all())
    if frame.empty:
        return pd.DataFrame(columns=["campaign", "job_id", "job_key", "model", "variant",
                                     "varying", "state", "error", "varying_flags"])
    frame["varying_flags"] = frame["varying"].map(_varying_text)
    return frame


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


def _speedup(runs: pd.DataFrame) -> float:
    """Geometric mean over prompts of median variant tok/s / median baseline tok/s."""
    medians = runs.pivot_table(index="prompt_id", columns="arm", values="decode_tok_s",
                               aggfunc="median")
    if not {"baseline", "variant"} <= set(medians.columns):
        return float("nan")
    ratios = (medians["variant"] / medians["baseline"]).dropna()
    return float(np.exp(np.log(ratios).mean())) if len(ratios) else float("nan")


def job_numbers(runs: pd.DataFrame) -> dict[str, float | int]:
    baseline = runs[runs["arm"] == "baseline"]
    variant = runs[runs["arm"] == "variant"]
    drafted = int(variant["spec_drafted"].sum())
    accepted = int(variant["spec_accepted"].sum())
    return {
        "baseline_tok_s": float(baseline["decode_tok_s"].median()),
        "variant_tok_s": float(variant["decode_tok_s"].median()),
        "speedup": _speedup(runs),
        "acceptance_rate": accepted / drafted if drafted else float("nan"),
        "drafted": drafted,
        "accepted": accepted,
        "runs": len(runs),
    }


def job_report(engine: Engine, campaign: str) -> pd.DataFrame:
    """One row per job of ``campaign`` with the comparison people quote."""
    jobs = jobs_frame(engine, campaign)
    runs = runs_frame(engine, campaign)
    rows = []
    for job in jobs.itertuples(index=False):
        job_runs = runs[runs["job_key"] == job.job_key] if not runs.empty else runs
        numbers = job_numbers(job_runs) if not job_runs.empty else {
            "baseline_tok_s": float("nan"), "variant_tok_s": float("nan"),
            "speedup": float("nan"), "acceptance_rate": float("nan"),
            "drafted": 0, "accepted": 0, "runs": 0}
        rows.append({"campaign": job.campaign, "job_key": job.job_key, "model": job.model,
                     "variant": job.variant, "varying_flags": job.varying_flags,
                     "state": job.state, **numbers})
    return pd.DataFrame(rows, columns=REPORT_COLUMNS)
