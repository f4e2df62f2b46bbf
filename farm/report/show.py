"""What ``farm report``, ``farm compare`` and ``farm export`` print or write: frames loaded
from the store, rendered in the format asked for."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import cast

import pandas as pd
from rich.console import Console

from farm.errors import ConfigError
from farm.report.frames import (
    category_report,
    category_summary,
    group_report,
    job_report,
    latest_campaign,
    runs_frame,
    with_design_columns,
)
from farm.report.text import (
    ReportFormat,
    category_table,
    compare_table,
    curve_tables,
    group_table,
    print_wide,
    render,
    to_json,
    wide_console,
)
from farm.settings import Settings
from farm.store.db import open_store


def show_report(settings: Settings, campaign: str | None, fmt: str, *,
                all_campaigns: bool = False, group_by: str | None = None,
                by_category: bool = False, output: Path | None = None,
                wide: bool = False) -> None:
    """The jobs of ``campaign`` (default the latest) per job, per group or per category."""
    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        report = job_report(engine, name)
        runs = runs_frame(engine, name) if by_category or fmt == "html" else None
    console = wide_console()
    title = "all campaigns" if name is None else f"campaign {name}"
    if fmt == "html":
        _write_html(title, report, runs, output)
        return
    if by_category and runs is not None:
        summary = category_summary(category_report(runs, report))
        if fmt == "table":
            console.print(category_table(summary, title))
        else:
            render(summary, title, cast(ReportFormat, fmt), console)
        return
    if group_by is None:
        render(report, title, cast(ReportFormat, fmt), console, wide=wide)
        return
    groups = group_report(report, group_by)
    if fmt == "table":
        console.print(group_table(groups, group_by))
    else:
        render(groups, title, cast(ReportFormat, fmt), console)


def _write_html(title: str, report: pd.DataFrame, runs: pd.DataFrame | None,
                output: Path | None) -> None:
    # Here, not at the top: matplotlib takes most of a second to load, and only HTML plots.
    from farm.report.html import render_html

    if output is None:
        raise ConfigError("--format html writes a file: give -o report.html")
    runs = runs if runs is not None else pd.DataFrame()
    jobs = with_design_columns(report)
    page = render_html(title, jobs, category_report(runs, report), runs)
    output.write_text(page, encoding="utf-8")
    print(f"wrote {output} ({len(page) // 1024} KiB)")


def show_comparison(settings: Settings, a: str, b: str, fmt: str, *,
                    build_a: str | None = None, build_b: str | None = None) -> None:
    """Campaigns (or builds) A and B side by side, as a table, CSV or JSON."""
    from farm.report.compare import compare

    with open_store(settings) as engine:
        frame = compare(engine, a, b, build_a=build_a, build_b=build_b)
    if fmt == "table":
        print_wide(Console(), compare_table(frame, a, b))
    elif fmt == "json":
        print(to_json(frame))
    else:
        print(frame.to_csv(index=False), end="")


def show_curve(settings: Settings, campaign: str | None, fmt: str, *,
               all_campaigns: bool = False, output: Path | None = None) -> None:
    """The engine cost curve of the synthetic-acceptance jobs of ``campaign`` (default the
    latest; every campaign with ``all_campaigns``), as tables, CSV or JSON; ``output``
    also gets the plot (PNG)."""
    from farm.report.curve import curve_points, curve_table

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        points = curve_points(job_report(engine, name))
    title = "all campaigns" if name is None else f"campaign {name}"
    if points.empty:
        raise ConfigError(f"{title} has no synthetic-acceptance job with a speedup yet: add an "
                          "`engine-curve:` to the matrix (README, \"Engine cost curve\") and "
                          "run it, or give another campaign")
    curves = curve_table(points)
    if fmt == "json":
        print(json.dumps({"curves": json.loads(curves.to_json(orient="records")),
                          "points": json.loads(points.to_json(orient="records"))}, indent=1))
    elif fmt == "csv":
        print(curves.to_csv(index=False), end="")
    else:
        console = wide_console()
        for table in curve_tables(curves, points, title):
            print_wide(console, table)
    if output is not None:
        from farm.report.plots import engine_curve

        engine_curve(points, output)
        print(f"wrote {output}", file=sys.stderr if fmt != "table" else sys.stdout)


def export_runs(settings: Settings, campaign: str | None, fmt: str, output: Path) -> int:
    """Write the tidy runs of a campaign (default the latest) as CSV or Parquet."""
    with open_store(settings) as engine:
        runs = runs_frame(engine, campaign or latest_campaign(engine))
    if fmt == "parquet":
        runs.to_parquet(output, index=False)
    else:
        lists = [column for column in ("argv", "tokens", "spec_accepted_per_pos",
                                       "throttle_reasons") if column in runs]
        runs.assign(**{c: runs[c].map(json.dumps) for c in lists}).to_csv(output, index=False)
    return len(runs)
