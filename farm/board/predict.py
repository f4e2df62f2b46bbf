"""``farm recommend``'s prediction beside the board's rows (docs/board.md).

Where a machine's bundles hold engine-curve jobs (synthetic acceptance, a matrix's
``engine-curve:``) for the model, build and spec type of its drafter jobs, the farm
predicts each drafter setting's speedup at every draft length the curves cover, from that
machine's own acceptance and its own cost curve (``farm.results.recommend.predicted``): an
engine's cost is its GPU's and build's, so one machine's curve never predicts another's.
Each prediction lands on the board's key, the setting written as the rows write it at the
predicted draft length; ``farm.stats.board.pool_predictions`` combines machines.
"""

from __future__ import annotations

import math

import pandas as pd
from sqlalchemy import Engine, select

from farm.board.view import canonical_flags, setting_text
from farm.matrix.spec import JobSpec
from farm.results.curve import cost_curves, curve_points
from farm.results.recommend import ALL_CATEGORIES, predicted
from farm.results.rows import job_report
from farm.results.runs import runs_frame
from farm.stats.intervals import t_margin
from farm.store.board import BoardJob
from farm.store.models import Campaign, Job

MACHINE_COLUMNS = ["model", "gpu", "backend", "setting", "draft_n_max", "machine",
                   "log_speedup", "log_se", "df"]


def _accepted(engine: Engine) -> pd.DataFrame:
    """Every job the board took (not refused): its key, campaign, machine and spec."""
    query = (select(Job.job_key, Campaign.name.label("campaign"), BoardJob.machine_id,
                    Job.spec)
             .join(BoardJob, BoardJob.job_id == Job.id)
             .join(Campaign, Campaign.id == Job.campaign_id)
             .where(BoardJob.refused.is_(None)))
    with engine.connect() as connection:
        return pd.DataFrame(connection.execute(query).mappings().all(),
                            columns=["job_key", "campaign", "machine_id", "spec"])


def machine_predictions(engine: Engine, rows: pd.DataFrame) -> pd.DataFrame:
    """One row per machine x model x GPU x backend x setting at a predicted draft length
    (``MACHINE_COLUMNS``, log scale): its prediction over all prompt categories. ``rows``
    are the board's variant jobs (``farm.board.view.board_jobs``), which give each source
    job its model's sha256, GPU and backend."""
    accepted = _accepted(engine)
    if accepted.empty:
        return pd.DataFrame(columns=MACHINE_COLUMNS)
    report = job_report(engine, None)
    report = report[report["job_key"].isin(set(accepted["job_key"]))]
    points = curve_points(report)
    machine_of = dict(zip(accepted["campaign"], accepted["machine_id"], strict=True))
    points = points.assign(machine=points["campaign"].map(machine_of))
    drafters = rows.set_index("board_key")
    specs = dict(zip(accepted["job_key"], accepted["spec"], strict=True))
    found = []
    for campaign, jobs in report[report["job_key"].isin(drafters.index)].groupby("campaign"):
        machine = machine_of[str(campaign)]
        curves = cost_curves(points[points["machine"] == machine])
        if not curves:
            continue
        candidates = predicted(jobs, runs_frame(engine, str(campaign)), curves)
        chosen = candidates[candidates["category"] == ALL_CATEGORIES]
        for candidate in chosen.to_dict(orient="records"):
            speedup, low, high, df = (float(candidate[key])
                                      for key in ("speedup", "low", "high", "df"))
            if not (speedup > 0 and low > 0 and df >= 1):
                continue  # insufficient data: no prediction to show
            source = drafters.loc[candidate["source_job"]]
            flags = canonical_flags(JobSpec.model_validate(specs[candidate["source_job"]]))
            found.append({
                "model": source["model"], "gpu": source["gpu"], "backend": source["backend"],
                "setting": setting_text(flags, int(candidate["draft_n_max"])),
                "draft_n_max": float(candidate["draft_n_max"]), "machine": machine,
                "log_speedup": math.log(speedup), "log_se": _log_se(low, high, df), "df": df})
    return pd.DataFrame(found, columns=MACHINE_COLUMNS)


def _log_se(low: float, high: float, df: float) -> float:
    """The standard error of a prediction's log, from its 95% interval (symmetric on the
    log scale, ``farm.stats.prediction.predict_speedup``) and df."""
    return math.log(high / low) / (2.0 * t_margin(1.0, df))
