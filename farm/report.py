"""Render the per-job report as a terminal table, CSV or JSON."""

from __future__ import annotations

import math
import sys
from collections.abc import Hashable, Mapping
from typing import Any, Literal

import pandas as pd
from rich.console import Console
from rich.table import Table

ReportFormat = Literal["table", "csv", "json", "html"]


def wide_console() -> Console:
    """A terminal's own width, or wide enough for tables when output goes to a pipe."""
    return Console() if sys.stdout.isatty() else Console(width=200)


def to_json(report: pd.DataFrame) -> str:
    """A JSON list, one object per line; NaN and missing values are null."""
    lines = report.to_json(orient="records", lines=True, double_precision=15).splitlines()
    return "[\n" + ",\n".join(lines) + "\n]"


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def _speedup_cell(row: Mapping[Hashable, Any]) -> str:
    speedup = float(row["speedup"])
    if math.isnan(speedup):
        return "no drafts" if row["speculation"] == "none" else "-"
    low, high = float(row["ci_low"]), float(row["ci_high"])
    interval = "" if math.isnan(low) else f" [{low:.2f}, {high:.2f}]"
    return f"{speedup:.2f}x{interval}"


def _flags(row: Mapping[Hashable, Any]) -> str:
    flags = []
    if row["speculation"] == "none":
        flags.append("no drafts")
    if row["agreement_suspect"] is True:
        flags.append("outputs diverge")
    if row["drift_flag"] is True:
        flags.append("drift")
    if row["failure_class"]:
        flags.append(str(row["failure_class"]))
    if row["throttled_runs"]:
        flags.append(f"GPU throttled in {row['throttled_runs']} runs")
    if row["spilled_runs"]:
        flags.append("weights not all on GPU")
    return ", ".join(flags)


def to_table(report: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    numeric = ("base tok/s", "var tok/s", "speedup [95% CI]", "pairs", "accept", "agree",
               "drafted", "runs")
    for header in ("job", "model", "variant", "varying flags", "class", "state", *numeric,
                   "flags"):
        table.add_column(header, justify="right" if header in numeric else "left")
    for row in report.to_dict(orient="records"):
        accept, agree = float(row["acceptance_rate"]), float(row["agreement"])
        table.add_row(str(row["job_key"])[:10], str(row["model"]), str(row["variant"]),
                      str(row["varying_flags"]), str(row["gpu_class"]), str(row["state"]),
                      _fmt(row["baseline_tok_s"]), _fmt(row["variant_tok_s"]),
                      _speedup_cell(row), "-" if pd.isna(row["pairs"]) else str(row["pairs"]),
                      "-" if math.isnan(accept) else f"{accept:.0%}",
                      "-" if math.isnan(agree) else f"{agree:.0%}",
                      str(row["drafted"]), str(row["runs"]), _flags(row))
    return table


def group_table(groups: pd.DataFrame, by: str) -> Table:
    table = Table(title=f"by {by}", title_justify="left")
    for header in (by, "jobs", "speedup", "min", "max", "drafted", "accepted", "runs"):
        table.add_column(header, justify="left" if header == by else "right")
    for row in groups.to_dict(orient="records"):
        table.add_row(str(row[by]), str(row["jobs"]),
                      *(f"{_fmt(float(row[k]), 2)}x" for k in ("speedup", "min_speedup",
                                                              "max_speedup")),
                      str(row["drafted"]), str(row["accepted"]), str(row["runs"]))
    return table


def category_table(summary: pd.DataFrame, title: str) -> Table:
    table = Table(title=f"{title}: speedup by prompt category", title_justify="left")
    for header in ("variant", "category", "jobs", "speedup", "95% CI"):
        table.add_column(header, justify="left" if header in ("variant", "category") else "right")
    for row in summary.to_dict(orient="records"):
        low, high = float(row["low"]), float(row["high"])
        table.add_row(str(row["variant"]), str(row["category"]), str(row["jobs"]),
                      f"{float(row['speedup']):.2f}x",
                      "-" if math.isnan(low) else f"[{low:.2f}, {high:.2f}]")
    return table


def render(report: pd.DataFrame, title: str, fmt: ReportFormat, console: Console) -> None:
    if fmt == "json":
        print(to_json(report))
    elif fmt == "csv":
        print(report.to_csv(index=False), end="")
    else:
        console.print(to_table(report, title))
