"""Jobs combined: per group of a report (random effects over jobs), per prompt category."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from farm.matrix.flags import draft_length
from farm.stats.difference import adjusted_p_values, ratio_p_value, verdicts
from farm.stats.intervals import NAN

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

    from farm.stats.design import Design


def _pooled(frame: pd.DataFrame, keys: list[str], estimate: str) -> pd.DataFrame:
    """Per group of ``keys``: the typical speedup with its random-effects interval and the
    between-job spread tau (``farm.stats.pooling.pool_jobs``), from each job's ``estimate``, the
    standard error of its log (``log_se``) and its degrees of freedom (``df``)."""
    import numpy as np
    import pandas as pd

    from farm.stats.pooling import pool_jobs

    rows = []
    for key, jobs in frame.groupby(keys, dropna=False):
        dfs = [int(n) if pd.notna(n) else 0 for n in jobs["df"]]
        pooled = pool_jobs(np.log(jobs[estimate].astype(float)),
                           jobs["log_se"].astype(float), dfs)
        rows.append({**dict(zip(keys, key, strict=True)), "jobs": len(jobs),
                     "speedup": pooled.estimate, "low": pooled.low, "high": pooled.high,
                     "tau": pooled.tau,
                     "p_value": ratio_p_value(math.log(pooled.estimate), pooled.log_se,
                                              pooled.df) if pooled.estimate > 0 else NAN})
    pooled_rows = pd.DataFrame(rows, columns=[*keys, "jobs", "speedup", "low", "high", "tau",
                                              "p_value"])
    return _with_verdicts(pooled_rows, "speedup")


def _with_verdicts(rows: pd.DataFrame, estimate: str) -> pd.DataFrame:
    """The rows with each one's q value and verdict against no speedup (1x), the false
    discovery rate held at 5% across the rows of the report, as ``farm compare`` holds it
    across its jobs: "faster", "slower", "within noise" or "no interval"."""
    p_values = [float(p) for p in rows["p_value"]]
    return rows.assign(q_value=adjusted_p_values(p_values),
                       verdict=verdicts([float(s) for s in rows[estimate]], p_values,
                                        "faster", "slower"))


def group_report(report: pd.DataFrame, by: str) -> pd.DataFrame:
    """Jobs grouped by a column: the typical speedup with its random-effects interval and
    between-job spread (tau), the range, counters, runs. Kinds of job never pool together:
    an A/A control or a synthetic arm is a group of its own beside the variants."""
    import pandas as pd

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


def with_design_columns(report: pd.DataFrame, lengths: Mapping[str, int] | None = None
                        ) -> pd.DataFrame:
    """The report plus what plots sweep over: the spec type and the draft length (from the
    varying flags, else ``lengths``: the job's own, ``farm.results.runs.draft_lengths_of``)."""
    import pandas as pd

    spec_type = report["varying"].map(lambda v: v.get("spec-type") or "")
    draft = pd.to_numeric(report["varying"].map(draft_length), errors="coerce")
    if lengths:
        draft = draft.fillna(pd.to_numeric(report["job_key"].map(lengths), errors="coerce"))
    return report.assign(spec_type=spec_type, draft_n_max=draft)


def category_report(runs: pd.DataFrame, report: pd.DataFrame,
                    designs: Mapping[str, Design | None]) -> pd.DataFrame:
    """Per job and prompt category: speedup with its interval over block pairs, made with
    the job's design (``designs`` by job key, ``farm.results.runs.job_designs``), and its
    verdict against 1x at a false discovery rate of 5% across the rows."""
    import pandas as pd

    from farm.stats.speedup import speedup_by

    columns = ["job_key", "model", "variant", "category", "estimate", "low", "high", "pairs",
               "log_se", "df"]
    if runs.empty:
        return pd.DataFrame(columns=[*columns, "p_value", "q_value", "verdict"])
    names = {str(row["job_key"]): (row["model"], row["variant"])
             for row in report.to_dict(orient="records")}
    parts = []
    for job_key, job_runs in runs.groupby("job_key"):
        model, variant = names[str(job_key)]
        by = speedup_by(job_runs, "prompt_category", designs.get(str(job_key))).rename(
            columns={"prompt_category": "category"})
        parts.append(by.assign(job_key=job_key, model=model, variant=variant))
    rows = pd.concat(parts, ignore_index=True)[columns]
    rows["p_value"] = [ratio_p_value(math.log(value), float(se), float(df)) if value > 0
                       else NAN for value, se, df in zip(rows["estimate"], rows["log_se"],
                                                          rows["df"], strict=True)]
    return _with_verdicts(rows, "estimate")


def category_summary(categories: pd.DataFrame) -> pd.DataFrame:
    """Per variant and category: the typical speedup of the jobs with its random-effects
    interval and between-job spread (tau), from each job's log standard error and df, and
    its verdict against 1x at a false discovery rate of 5% across the rows."""
    return _pooled(categories, ["variant", "category"], "estimate")
