"""``farm report``: load the per-job report from the store and render it."""

from __future__ import annotations

import sys
from typing import cast

from rich.console import Console

from farm.analysis import job_report, latest_campaign
from farm.errors import ConfigError
from farm.report import ReportFormat, render
from farm.settings import Settings, redact_url
from farm.store.db import make_engine, table_names


def show_report(settings: Settings, campaign: str | None, fmt: str) -> None:
    engine = make_engine(settings.database_url)
    try:
        if "campaign" not in table_names(engine):
            raise ConfigError(f"the store {redact_url(settings.database_url)} holds no results "
                              "yet; run `farm run MATRIX` first")
        name = campaign or latest_campaign(engine)
        console = Console() if sys.stdout.isatty() else Console(width=200)
        render(job_report(engine, name), name, cast(ReportFormat, fmt), console)
    finally:
        engine.dispose()
