"""The engine cost curve: what one engine (build x model x GPU class x spec type) delivers as
a function of acceptance, from its synthetic-acceptance jobs (``--spec-synth-*``, the
matrix's ``engine-curve``), kept in the store like every job.

Each such job is one point: its measured mean acceptance length (tokens per speculative
step, the target's included) and its speedup with interval. Per draft length the points fit
a ``farm.stats.curve.CostCurve`` (a line, or a quadratic where the line does not fit): the
cost of one speculative step relative to a plain decode step, and the break-even
acceptance length, each with its interval. Nothing is cached: the curve is refitted from
the jobs' summaries whenever it is read.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from farm.matrix.flags import draft_length
from farm.stats.curve import CostCurve, cost_curve

ENGINE_KEYS = ["model", "gpu_class", "build", "spec_type"]
POINT_COLUMNS = [*ENGINE_KEYS, "draft_n_max", "campaign", "job_key", "synth_len",
                 "acceptance_length", "speedup", "ci_low", "ci_high", "log_se", "df",
                 "step_cost"]
FIT_COLUMNS = [*ENGINE_KEYS, "draft_n_max", "intercept", "slope", "curvature", "break_even",
               "break_even_low", "break_even_high"]
CURVE_COLUMNS = [*ENGINE_KEYS, "draft_n_max", "points", "length_min", "length_max",
                 "step_cost", "step_cost_low", "step_cost_high", "break_even",
                 "break_even_low", "break_even_high", "speedup_at_max", "speedup_at_max_low",
                 "speedup_at_max_high", "tau", "df", "shape", "lack_of_fit_p"]


def _number(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def curve_points(report: pd.DataFrame) -> pd.DataFrame:
    """The synthetic-acceptance jobs of a job report (``farm.results.rows.job_report``)
    that measured a speedup and an acceptance length, one row each."""
    measured = report[(report["kind"] == "synthetic") & report["speedup"].notna()
                      & report["mean_accepted_length"].notna()]
    if measured.empty:
        return pd.DataFrame(columns=POINT_COLUMNS)
    varying = measured["varying"]
    points = pd.DataFrame({
        "model": measured["model"], "gpu_class": measured["gpu_class"],
        "build": [v.get("build") or b for v, b in zip(varying, measured["build"], strict=True)],
        "spec_type": varying.map(lambda v: v.get("spec-type") or ""),
        "draft_n_max": varying.map(lambda v: _number(draft_length(v))),
        "campaign": measured["campaign"], "job_key": measured["job_key"],
        "synth_len": varying.map(lambda v: _number(v.get("spec-synth-len"))),
        "acceptance_length": measured["mean_accepted_length"].astype(float),
        "speedup": measured["speedup"].astype(float),
        "ci_low": measured["ci_low"].astype(float), "ci_high": measured["ci_high"].astype(float),
        "log_se": measured["log_se"].astype(float), "df": measured["df"]})
    points["step_cost"] = points["acceptance_length"] / points["speedup"]
    return points.sort_values([*ENGINE_KEYS, "draft_n_max", "acceptance_length"],
                              ignore_index=True)[POINT_COLUMNS]


def cost_curves(points: pd.DataFrame) -> dict[tuple[Any, ...], CostCurve]:
    """A ``CostCurve`` per engine and draft length, keyed ``(*ENGINE_KEYS, draft_n_max)``."""
    curves = {}
    for key, group in points.dropna(subset=["draft_n_max"]).groupby(
            [*ENGINE_KEYS, "draft_n_max"], sort=True, dropna=False):
        dfs = [int(n) if pd.notna(n) else 0 for n in group["df"]]
        curves[tuple(key)] = cost_curve(int(group["draft_n_max"].iloc[0]),
                                        group["acceptance_length"],
                                        group["speedup"], group["log_se"], dfs)
    return curves


def curve_table(points: pd.DataFrame) -> pd.DataFrame:
    """One row per engine and draft length: the step cost and the break-even acceptance
    length with their 95% intervals, the speedup at the longest measured acceptance, the
    measured range of lengths (outside it a prediction extrapolates), tau, what the fit
    leaves unexplained (in speedup units), and the fit's shape: "line", or "curved" when
    the lack-of-fit test (its p value) kept a curvature term."""
    rows = []
    for key, curve in cost_curves(points).items():
        cost = curve.step_cost()
        even = curve.break_even()
        top = curve.speedup(curve.lengths[1])
        rows.append([*key[:-1], int(key[-1]), curve.points, *curve.lengths, *cost, *even,
                     *top, curve.tau, curve.df,
                     "curved" if curve.curvature != 0.0 else "line", curve.lack_of_fit_p])
    return pd.DataFrame(rows, columns=CURVE_COLUMNS)


def curve_fits(points: pd.DataFrame) -> pd.DataFrame:
    """One row per engine and draft length: the fit (intercept, slope, curvature, 0 for a
    line) and the break-even length with its interval, what a plot of the curve draws."""
    rows = [[*key[:-1], key[-1], *curve.coefficients, *curve.break_even()]
            for key, curve in cost_curves(points).items()]
    return pd.DataFrame(rows, columns=FIT_COLUMNS)
