"""``farm report``: load the per-job report from the store and render it."""

from __future__ import annotations

import sys
from typing import cast

from rich.console import Console

from farm.analysis import group_report, job_report, latest_campaign
from farm.errors import ConfigError
from farm.report import ReportFormat, group_table, render
from farm.settings import Settings, redact_url
from farm.store.db import make_engine, table_names


def show_report(settings: Settings, campaign: str | None, fmt: str, *,
                all_campaigns: bool = False, group_by: str | None = None) -> None:
    engine = make_engine(settings.database_url)
    try:
        if "campaign" not in table_names(engine):
            raise ConfigError(f"the store {redact_url(settings.database_url)} holds no results "
                              "yet; run `farm run MATRIX` first")
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        report = job_report(engine, name)
    finally:
        engine.dispose()
    console = Console() if sys.stdout.isatty() else Console(width=200)
    title = "all campaigns" if name is None else f"campaign {name}"
    if group_by is None:
        render(report, title, cast(ReportFormat, fmt), console)
        return
    groups = group_report(report, group_by)
    if fmt == "table":
        console.print(group_table(groups, group_by))
    else:
        render(groups, title, cast(ReportFormat, fmt), console)
