"""Every output format of the result commands, in one place: its name, help line and file
suffix, and per kind of result (``farm.report.kinds``) the renderer that writes it. A
command makes its result and hands it to ``write``; it never branches on the format.
Adding a format is one entry in ``FORMATS`` and one renderer per kind it supports; adding
a kind, one renderer in each format that shows it.

Renderers load pandas, rich and matplotlib where they run, not with this module: the CLI
imports it for its ``--format`` choices.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.report import kinds
from farm.report.cells import clean, clean_lines
from farm.report.output import Folder, emit
from farm.report.sheet import markdown, table_text, terminal_colour, terminal_width


@dataclass(frozen=True)
class Target:
    """Where a result goes: ``output`` (a file) or the terminal, fitted unless ``wide``."""

    wide: bool = False
    output: Path | None = None

    @property
    def width(self) -> int | None:
        """The width tables fit: the terminal's, none with ``--wide`` or in a file."""
        return None if self.wide or self.output is not None else terminal_width()

    @property
    def colour(self) -> bool:
        """Whether tables show their columns' tones: on a terminal that shows colour
        (``terminal_colour``: ``NO_COLOR``, ``FORCE_COLOR``, a TTY), ``--wide`` or not;
        never in a file."""
        return self.output is None and terminal_colour()


Renderer = Callable[[Any, Target], "str | bytes | Folder"]


@dataclass(frozen=True)
class Format:
    """One output format: what ``--format`` names it, its help line, the suffix of a file
    of it, and its renderer per kind of result. ``file_only``: written with ``-o`` only;
    ``draws``: the result carries what a page draws (the command loads it); ``kept``:
    it prints a report's kept rows as their text (``kinds.JobReport.kept``); ``folder``:
    it writes many files, ``-o`` names their folder (a ``Folder``)."""

    name: str
    help: str
    suffix: str
    renderers: Mapping[type, Renderer] = field(repr=False)
    file_only: bool = False
    draws: bool = False
    kept: bool = False
    folder: bool = False


# --- table and markdown ----------------------------------------------------------------

def _sheets(sheets: Any, target: Target, fmt: str) -> str:
    return markdown(sheets) if fmt == "md" else table_text(sheets, target.width,
                                                          colour=target.colour)


def _job_report_text(report: kinds.JobReport, target: Target, fmt: str) -> str:
    """The report's answer, its per-job table and (in a terminal table) a line per flag it
    shows, each wrapped to the terminal's width."""
    from farm.columns import report_frame
    from farm.report.headline import headlines
    from farm.report.legend import job_legend
    from farm.report.text import job_sheet

    frame = report_frame(report.rows)
    width = None if fmt == "md" else target.width
    tables = _sheets([job_sheet(frame, report.title)], target, fmt)
    lines = headlines(frame)
    if lines:
        bullet = "- " if fmt == "md" else ""
        tables = ("\n".join(_wrapped([bullet + line for line in lines], width,
                                      whole_brackets=True)) + "\n\n" + tables)
    legend = _wrapped(job_legend(frame), width) if fmt == "table" else []
    return "\n".join([tables.rstrip("\n"), *legend]) + "\n" if legend else tables


def _wrapped(lines: list[str], width: int | None, *, whole_brackets: bool = False
             ) -> list[str]:
    """Each line cleaned of control characters (it names models, variants and failures:
    a stranger's text, as a table's cells are) and wrapped at spaces to ``width`` (none:
    as they are); ``whole_brackets``: never inside a bracket, so an interval such as
    "[1.50, 1.53]" stays on one line."""
    import re
    import textwrap

    def held(line: str) -> str:
        return re.sub(r"\[[^\]]*\]", lambda found: found[0].replace(" ", "\0"), line)

    lines = [clean(line) for line in lines]
    return [textwrap.fill(held(line) if whole_brackets else line, width,
                          subsequent_indent="  ", break_long_words=False).replace("\0", " ")
            if width else line for line in lines]


def _text_renderers(fmt: str) -> dict[type, Renderer]:
    """The renderers a table (``fmt`` table) and markdown (md) share."""
    from farm.report import bisect, tune

    def peers(result: kinds.Peers, target: Target) -> str:
        from farm.report.text import peer_sheets

        return _sheets(peer_sheets(result.first, result.second, result.title), target,
                       fmt)

    def curves(result: kinds.Curves, target: Target) -> str:
        from farm.report.text import curve_sheets

        return _sheets(curve_sheets(result.first, result.second, result.title), target, fmt)

    def recommendations(result: kinds.Recommendations, target: Target) -> str:
        from farm.report.text import recommendation_sheets

        return _sheets(recommendation_sheets(result.first, result.second, result.title),
                       target, fmt)

    def history_text(result: kinds.History, target: Target) -> str:
        from farm.report import history  # pandas and matplotlib: here, not at startup

        every = target.wide  # --wide: every acceptance position, not only the first four
        if fmt == "md":
            return history.history_markdown(result.frames, result.title, every_position=every)
        tables = table_text(history.history_sheets(result.frames, result.title,
                                                   every_position=every), target.width,
                            colour=target.colour)
        legend = history.acceptance_legend(result.frames, every_position=every)
        return tables + "\n".join(_wrapped([legend], target.width)) + "\n" if legend \
            else tables

    def board(result: kinds.Board, target: Target) -> str:
        from farm.report.board import board_markdown, board_text

        return board_markdown(result) if fmt == "md" else board_text(result, target.width)

    return {
        kinds.JobReport: lambda result, target: _job_report_text(result, target, fmt),
        kinds.Tables: lambda result, target: _sheets(result.sheets, target, fmt),
        kinds.History: history_text,
        kinds.BisectAnswer: lambda result, _: (bisect.bisect_markdown if fmt == "md" else
                                               bisect.bisect_text)(result.body),
        kinds.BisectPlan: lambda result, _: bisect.plan_text(result.body),
        kinds.TuneAnswer: lambda result, target: (
            tune.tune_markdown(result.body) if fmt == "md"
            else tune.tune_text(result.body, target.width)),
        kinds.TuneSpace: lambda result, _: tune.space_text(result.body),
        kinds.Peers: peers, kinds.Curves: curves, kinds.Recommendations: recommendations,
        kinds.Board: board}


# --- CSV -------------------------------------------------------------------------------

def to_csv(frame: Any) -> str:
    """CSV that any tool loads: lists and mappings in a cell as JSON, not Python's repr."""
    nested = [column for column in frame.columns if frame[column].dtype == object
              and frame[column].map(lambda value: isinstance(value, dict | list | tuple)).any()]
    return str(frame.assign(**{str(column): frame[column].map(
        lambda value: json.dumps(value) if isinstance(value, dict | list | tuple) else value)
        for column in nested}).to_csv(index=False))


def _job_report_csv(report: kinds.JobReport, _: Target) -> str:
    """Every column of every job, and the answer of its campaign x model x GPU class."""
    from farm.columns import report_frame
    from farm.report.headline import with_headlines

    frame = report_frame(report.rows)
    return to_csv(frame.assign(headline=[row["headline"]
                                         for row in with_headlines(report.rows)]))


_CSV: dict[type, Renderer] = {
    kinds.JobReport: _job_report_csv,
    kinds.Tables: lambda result, _: to_csv(result.frame),
    **{kind: lambda result, _: to_csv(result.first)
       for kind in (kinds.Peers, kinds.Curves, kinds.Recommendations)},
    kinds.Runs: lambda result, _: to_csv(result.runs)}


# --- JSON ------------------------------------------------------------------------------

def _frames_json(**frames: Any) -> str:
    """Frames as one JSON object of record lists (NaN as null)."""
    return json.dumps({name: json.loads(frame.to_json(orient="records", date_format="iso"))
                       for name, frame in frames.items()}, indent=1)


def _frame_json(frame: Any) -> str:
    from farm.report.text import to_json

    return to_json(frame)


def _job_report_json(report: kinds.JobReport, _: Target) -> str:
    """Every job's row without pandas, each with its campaign x model x GPU class's answer,
    as the table opens."""
    from farm.report.headline import with_headlines
    from farm.report.text import rows_to_json

    return rows_to_json(with_headlines(report.rows), report.kept)


def _peers_json(result: kinds.Peers, _: Target) -> str:
    return json.dumps({"beside": json.loads(_frame_json(result.first)),
                       "unmatched": json.loads(_frame_json(result.second))}, indent=1)


def _board_json(result: kinds.Board, _: Target) -> str:
    from farm.report.board import board_json

    return board_json(result)


def _history_json(result: kinds.History, _: Target) -> str:
    from farm.report.history import history_json

    return history_json(result.frames)


_JSON: dict[type, Renderer] = {
    kinds.JobReport: _job_report_json,
    kinds.Tables: lambda result, _: _frame_json(result.frame),
    kinds.History: _history_json,
    **{kind: lambda result, _: json.dumps(result.body, indent=2)
       for kind in (kinds.BisectAnswer, kinds.BisectPlan, kinds.TuneAnswer, kinds.TuneSpace)},
    kinds.Peers: _peers_json,
    kinds.Curves: lambda result, _: _frames_json(curves=result.first, points=result.second),
    kinds.Recommendations: lambda result, _: _frames_json(recommendations=result.first,
                                                          candidates=result.second),
    kinds.Runs: lambda result, _: _frame_json(result.runs),
    kinds.Board: _board_json}


# --- HTML and Parquet ------------------------------------------------------------------

def _campaign_page(title: str, page: kinds.CampaignPage | None) -> bytes:
    # Here, not at the top: matplotlib takes most of a second to load, and only pages plot.
    from farm.report.html import render_html

    assert page is not None, "a format that draws gets its page from the command"
    return render_html(title, page.jobs, page.categories, page.runs, curve=page.curve,
                       recommendation=page.recommendation, groups=page.groups).encode()


def _history_page(result: kinds.History, _: Target) -> str:
    from farm.report.history import history_html

    return history_html(result.frames, result.title)


def _runs_parquet(result: kinds.Runs, _: Target) -> bytes:
    from farm.report.parquet import runs_parquet

    return runs_parquet(result.runs)


def _board_site(result: kinds.Board, _: Target) -> Folder:
    from farm.report.board_site import board_site

    return board_site(result)


_HTML: dict[type, Renderer] = {
    kinds.JobReport: lambda result, _: _campaign_page(result.title, result.page),
    kinds.ReportTables: lambda result, _: _campaign_page(result.title, result.page),
    kinds.History: _history_page}


FORMATS: dict[str, Format] = {fmt.name: fmt for fmt in (
    Format("table", "a table fitted to the terminal", ".txt", _text_renderers("table")),
    Format("md", "markdown tables (for a PR or issue)", ".md", _text_renderers("md")),
    Format("csv", "CSV, every column", ".csv", _CSV),
    Format("json", "JSON, every column", ".json", _JSON, kept=True),
    Format("html", "a self-contained page with plots (needs -o)", ".html", _HTML,
           file_only=True, draws=True),
    Format("parquet", "Parquet (needs -o)", ".parquet", {kinds.Runs: _runs_parquet},
           file_only=True),
    Format("site", "a static site of plain HTML files (needs -o DIR)", "/",
           {kinds.Board: _board_site}, file_only=True, folder=True),
)}


def formats_for(kind: type) -> tuple[str, ...]:
    """The formats that render ``kind``, in the registry's order."""
    return tuple(name for name, fmt in FORMATS.items() if _renderer(fmt, kind) is not None)


def _renderer(fmt: Format, kind: type) -> Renderer | None:
    """``fmt``'s renderer of ``kind``, or of the nearest kind it extends (a grouped report
    is shown as tables are, but for its page); None where it has none."""
    return next((fmt.renderers[base] for base in kind.__mro__ if base in fmt.renderers), None)


def check_target(kind: type, fmt: str, output: Path | None) -> None:
    """Refuse, before anything is read, a format that writes a file without ``-o``."""
    if FORMATS[fmt].file_only and output is None:
        stem = getattr(kind, "stem", "result")
        what = "a folder of files" if FORMATS[fmt].folder else "a file"
        raise ConfigError(f"--format {fmt} writes {what}: give -o {stem}{FORMATS[fmt].suffix}")


def render(result: object, fmt: str, target: Target) -> str | bytes | Folder:
    """``result`` in ``fmt``: text that ends in a newline, a file's bytes, or a folder's
    files."""
    check_target(type(result), fmt, target.output)
    renderer = _renderer(FORMATS[fmt], type(result))
    assert renderer is not None, f"{fmt} renders no {type(result).__name__}"
    data = renderer(result, target)
    return data if not isinstance(data, str) or data.endswith("\n") else data + "\n"


def write(result: object, fmt: str, target: Target) -> None:
    """``result`` in ``fmt``, on stdout or in ``target.output`` (whole or not at all)."""
    data = render(result, fmt, target)
    if fmt == "csv" and target.output is None and sys.stdout.isatty():
        # A CSV's cells are data, not a Sheet's (tables and markdown are cleaned there,
        # JSON escapes): on a terminal they are read, so a stranger's escapes lose their
        # control characters; a pipe or a file keeps the data as stored.
        data = clean_lines(str(data))
    emit(data, target.output, getattr(result, "what", ""))
