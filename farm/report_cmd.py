"""``farm report``: load the per-job report from the store and render it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import cast

import pandas as pd
from sqlalchemy import Engine

from farm.analysis import (
    category_report,
    category_summary,
    group_report,
    job_report,
    latest_campaign,
    runs_frame,
    with_design_columns,
)
from farm.errors import ConfigError
from farm.html_report import render_html
from farm.report import ReportFormat, category_table, group_table, render, wide_console
from farm.settings import Settings, redact_url
from farm.store.db import make_engine, require_current_schema, table_names, upgrade


def open_store(settings: Settings) -> Engine:
    """The store, at the current schema: the embedded SQLite is migrated in place (as
    `farm run` does); a shared PostgreSQL must have been upgraded with `farm db upgrade`."""
    engine = make_engine(settings.database_url)
    try:
        if "campaign" not in table_names(engine):
            raise ConfigError(f"the store {redact_url(settings.database_url)} holds no "
                              "results yet; run `farm run MATRIX` first")
        if settings.embedded:
            upgrade(engine)
        else:
            require_current_schema(engine)
    except BaseException:
        engine.dispose()
        raise
    return engine




def show_report(settings: Settings, campaign: str | None, fmt: str, *,
                all_campaigns: bool = False, group_by: str | None = None,
                by_category: bool = False, output: Path | None = None) -> None:
    engine = open_store(settings)
    try:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        report = job_report(engine, name)
        runs = runs_frame(engine, name) if by_category or fmt == "html" else None
    finally:
        engine.dispose()
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
        render(report, title, cast(ReportFormat, fmt), console)
        return
    groups = group_report(report, group_by)
    if fmt == "table":
        console.print(group_table(groups, group_by))
    else:
        render(groups, title, cast(ReportFormat, fmt), console)


def _write_html(title: str, report: pd.DataFrame, runs: pd.DataFrame | None,
                output: Path | None) -> None:
    if output is None:
        raise ConfigError("--format html writes a file: give -o report.html")
    runs = runs if runs is not None else pd.DataFrame()
    jobs = with_design_columns(report)
    page = render_html(title, jobs, category_report(runs, report), runs)
    output.write_text(page, encoding="utf-8")
    print(f"wrote {output} ({len(page) // 1024} KiB)")


def export_runs(settings: Settings, campaign: str | None, fmt: str, output: Path) -> int:
    """Write the tidy runs of a campaign (default the latest) as CSV or Parquet."""
    engine = open_store(settings)
    try:
        runs = runs_frame(engine, campaign or latest_campaign(engine))
    finally:
        engine.dispose()
    if fmt == "parquet":
        runs.to_parquet(output, index=False)
    else:
        lists = [column for column in ("argv", "tokens", "spec_accepted_per_pos",
                                       "throttle_reasons") if column in runs]
        runs.assign(**{c: runs[c].map(json.dumps) for c in lists}).to_csv(output, index=False)
    return len(runs)
