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


def to_table(report: pd.DataFrame, campaign: str) -> Table:
    table = Table(title=f"campaign {campaign}", title_justify="left")
    for header in ("job", "model", "variant", "varying flags", "state", "base tok/s",
                   "var tok/s", "speedup", "accept", "drafted", "accepted", "runs"):
        table.add_column(header, justify="right" if "tok" in header or header in (
            "speedup", "accept", "drafted", "accepted", "runs") else "left")
    for row in report.to_dict(orient="records"):
        speedup, accept = float(row["speedup"]), float(row["acceptance_rate"])
        table.add_row(str(row["job_key"])[:10], str(row["model"]), str(row["variant"]),
                      str(row["varying_flags"]), str(row["state"]),
                      _fmt(row["baseline_tok_s"]), _fmt(row["variant_tok_s"]),
                      "-" if math.isnan(speedup) else f"{speedup:.2f}x",
                      "-" if math.isnan(accept) else f"{accept:.0%}",
                      str(row["drafted"]), str(row["accepted"]), str(row["runs"]))
    return table


def render(report: pd.DataFrame, campaign: str, fmt: ReportFormat, console: Console) -> None:
    if fmt == "json":
        print(to_json(report))
    elif fmt == "csv":
        print(report.to_csv(index=False), end="")
    else:
        console.print(to_table(report, campaign))
