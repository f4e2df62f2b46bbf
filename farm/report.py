"""Render the per-job report as a terminal table, CSV or JSON."""

from __future__ import annotations

import json
import math
from typing import Any, Literal

import pandas as pd
from rich.console import Console
from rich.table import Table

ReportFormat = Literal["table", "csv", "json"]


def _clean(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def to_json(report: pd.DataFrame) -> str:
    rows = [{key: _clean(value) for key, value in row.items()}
            for row in report.to_dict(orient="records")]
    return json.dumps(rows, indent=2)


def _fmt(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def to_table(report: pd.DataFrame, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    numeric = ("base tok/s", "var tok/s", "speedup", "accept", "drafted", "accepted", "runs")
    for header in ("job", "model", "variant", "varying flags", "class", "state", *numeric):
        table.add_column(header, justify="right" if header in numeric else "left")
    for row in report.to_dict(orient="records"):
        speedup, accept = float(row["speedup"]), float(row["acceptance_rate"])
        table.add_row(str(row["job_key"])[:10], str(row["model"]), str(row["variant"]),
                      str(row["varying_flags"]), str(row["gpu_class"]), str(row["state"]),
                      _fmt(row["baseline_tok_s"]), _fmt(row["variant_tok_s"]),
                      "-" if math.isnan(speedup) else f"{speedup:.2f}x",
                      "-" if math.isnan(accept) else f"{accept:.0%}",
                      str(row["drafted"]), str(row["accepted"]), str(row["runs"]))
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


def render(report: pd.DataFrame, title: str, fmt: ReportFormat, console: Console) -> None:
    if fmt == "json":
        print(to_json(report))
    elif fmt == "csv":
        print(report.to_csv(index=False), end="")
    else:
        console.print(to_table(report, title))
