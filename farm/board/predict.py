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
from collections.abc import Hashable
from typing import Any

import pandas as pd
from sqlalchemy import Engine

from farm.board.view import setting_text
from farm.results.curve import cost_curves, curve_points
from farm.results.recommend import ALL_CATEGORIES, predicted
from farm.results.rows import job_report
from farm.results.runs import runs_frame
from farm.stats.intervals import t_margin

MACHINE_COLUMNS = ["model", "gpu", "backend", "setting", "draft_n_max", "machine",
                   "log_speedup", "log_se", "df"]


def machine_predictions(engine: Engine, jobs: pd.DataFrame) -> pd.DataFrame:
    """One row per machine x model x GPU x backend x setting at a predicted draft length
    (``MACHINE_COLUMNS``, log scale): its prediction over all prompt categories. ``jobs``
    are the board's (``farm.board.view.board_jobs``): its engine-curve points, and its
    variants, which give each source job its model's sha256, GPU, backend and flags. Only
    the campaigns of machines with an engine curve are read again."""
    curved = set(jobs.loc[jobs["kind"] == "synthetic", "machine"])
    mine = jobs[jobs["machine"].isin(curved)]
    drafters = mine[mine["kind"] == "variant"].set_index("board_key")
    found = []
    for machine, theirs in mine.groupby("machine"):
        report = pd.concat([job_report(engine, str(campaign))
                            for campaign in theirs["campaign"].unique()], ignore_index=True)
        report = report[report["job_key"].isin(set(theirs["board_key"]))]
        curves = cost_curves(curve_points(report))
        for campaign, drafting in report[report["job_key"].isin(drafters.index)].groupby(
                "campaign"):
            candidates = predicted(drafting, runs_frame(engine, str(campaign)), curves)
            chosen = candidates[candidates["category"] == ALL_CATEGORIES]
            found += [_row(candidate, drafters.loc[candidate["source_job"]], str(machine))
                      for candidate in chosen.to_dict(orient="records")
                      if _predicted(candidate)]
    return pd.DataFrame(found, columns=MACHINE_COLUMNS)


def _predicted(candidate: dict[Hashable, Any]) -> bool:
    """Whether ``candidate`` has a prediction (not insufficient data)."""
    return bool(candidate["speedup"] > 0 and candidate["low"] > 0 and candidate["df"] >= 1)


def _row(candidate: dict[Hashable, Any], source: pd.Series, machine: str) -> dict[str, Any]:
    """A candidate on the board's key: its source job's model, GPU and backend, its
    setting in the rows' words at the predicted draft length."""
    low, high, df = (float(candidate[key]) for key in ("low", "high", "df"))
    return {"model": source["model"], "gpu": source["gpu"], "backend": source["backend"],
            "setting": setting_text(source["flags"], int(candidate["draft_n_max"])),
            "draft_n_max": float(candidate["draft_n_max"]), "machine": machine,
            "log_speedup": math.log(float(candidate["speedup"])),
            # The interval is symmetric on the log scale (predict_speedup).
            "log_se": math.log(high / low) / (2.0 * t_margin(1.0, df)), "df": df}
