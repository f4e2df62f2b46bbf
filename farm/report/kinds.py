"""The kinds of result the commands hand to the format registry (``farm.report.formats``):
plain data (frames, rows, an answer as JSON writes it), made by the command from the store,
rendered by the registry in the format asked for.

pandas and the renderers load where a result is rendered, not with this module (the CLI
imports it to build its ``--format`` choices).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from farm.report.history import HistoryFrames
    from farm.report.html import EngineCurve, Recommendation
    from farm.report.sheet import Sheet


@dataclass(frozen=True)
class CampaignPage:
    """What the campaign's HTML page draws besides its jobs' table: per-job design columns
    (``jobs``), the per-category speedups, the runs, the engine curve, ``farm recommend``'s
    picks and ``--group-by``'s table."""

    jobs: pd.DataFrame
    categories: pd.DataFrame
    runs: pd.DataFrame
    curve: EngineCurve | None = None
    recommendation: Recommendation | None = None
    groups: Sheet | None = None


@dataclass(frozen=True)
class Tables:
    """A frame and the sheets that show it: CSV and JSON carry every column of the frame,
    a table or markdown the sheets (``farm compare``, ``farm recommend --check``)."""

    frame: pd.DataFrame
    sheets: Sequence[Sheet]


@dataclass(frozen=True)
class JobReport:
    """``farm report``: one row per job (``farm.results.rows.job_rows``), opened by the
    report's answer; ``page`` where the format draws one; ``kept`` where it prints kept
    rows as they are (``farm.results.rows.report_rows``: such a row holds only what the
    report works out across jobs, its text ``kept[i]`` the rest)."""

    title: str
    rows: Sequence[Mapping[str, Any]]
    page: CampaignPage | None = None
    kept: Sequence[str | None] | None = None
    stem = "report"


@dataclass(frozen=True)
class ReportTables(Tables):
    """``farm report --group-by`` or ``--by-category``: its table; ``page`` where the format
    draws one (the campaign's page, the groups' table first)."""

    title: str = ""
    page: CampaignPage | None = None
    stem = "report"


@dataclass(frozen=True)
class History:
    """``farm history``: the builds' series, intervals and changes (``HistoryFrames``)."""

    frames: HistoryFrames
    title: str
    stem = "history"


@dataclass(frozen=True)
class Document:
    """A workflow's answer or plan as ``--format json`` writes it (``body``); each kind
    below is one, its text and markdown made by its own renderer."""

    body: dict[str, Any]


class BisectAnswer(Document):
    """``farm bisect``'s answer (``farm.report.bisect``)."""


class BisectPlan(Document):
    """``farm bisect --dry-run``'s plan."""


class TuneAnswer(Document):
    """``farm tune``'s answer (``farm.report.tune``)."""


class TuneSpace(Document):
    """``farm tune --dry-run``'s space."""


@dataclass(frozen=True)
class FramePair:
    """A command's main table (``first``: CSV carries it alone), a second one JSON writes
    beside it (``second``), and the title; each kind below says what the two hold."""

    first: pd.DataFrame
    second: pd.DataFrame
    title: str


class Peers(FramePair):
    """``farm peers``: imported figures beside the farm's matching arms, then the rest."""


class Curves(FramePair):
    """``farm curve``: the engine cost curve per draft length, then the points it fits."""


class Recommendations(FramePair):
    """``farm recommend``: the pick per GPU class x model x category, then the candidates."""


@dataclass(frozen=True)
class Runs:
    """``farm export``: the tidy runs, typed (``farm.results.export.typed_runs``)."""

    runs: pd.DataFrame
    stem = "runs"

    @property
    def what(self) -> str:
        """What a written file holds, as the command says it."""
        return f"{len(self.runs)} runs"


@dataclass(frozen=True)
class Board:
    """``farm board show`` and ``site``: per model x GPU x backend x setting the figures
    the board computed (``farm.stats.board.board_rows``), the best setting of each model
    and GPU (``best_settings``), ``farm recommend``'s predictions where engine curves exist
    (``pool_predictions``), and the bundles behind them (``farm.board.view``)."""

    rows: pd.DataFrame
    best: pd.DataFrame
    bundles: pd.DataFrame
    predictions: pd.DataFrame
    title: str = "board"
    stem = "board"
