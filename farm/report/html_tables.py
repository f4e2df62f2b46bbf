"""The HTML page's tables: each per-job column's cell, the per-job table (its least needed
columns hidden in a narrow window), a text report's sheet and the per-category table.

Every cell returns HTML with the text taken from the frames escaped; the page
(``farm.report.html``) lays the tables out and draws its other sections with ``table``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from html import escape
from typing import Any

import pandas as pd

from farm.columns import table_columns
from farm.report import cells
from farm.report.sheet import Sheet
from farm.words import CLIENT_CLOCK, CLOCKS_DISAGREE


def _badge(kind: str, text: str) -> str:
    return f'<span class="badge {kind}">{escape(text)}</span>'


Cell = Callable[[Mapping[Any, Any]], str]  # returns HTML (already escaped)


def plain(column: str) -> Cell:
    """A cell showing ``column``'s value as text."""
    return lambda row: escape(cells.text(row.get(column)))


def number(column: str, fmt: Callable[[Any], str]) -> Cell:
    """A cell showing ``column``'s value as ``fmt`` writes it."""
    return lambda row: escape(fmt(row.get(column)))


def _agreement_cell(row: Mapping[Any, Any]) -> str:
    suspect = cells.flag(row.get("agreement_suspect"))
    return escape(cells.percent(row.get("agreement"))) + (
        _badge("suspect", "suspect") if suspect else "")


def _drift_cell(row: Mapping[Any, Any]) -> str:
    return _badge("drift", "drift") if cells.flag(row.get("drift_flag")) else ""


def _speedup_cell(row: Mapping[Any, Any]) -> str:
    """The speedup with its interval; a badge where the server's timings disagree with the
    client's clock, a note where the speeds are the client's."""
    notes = [_badge("clock", CLOCKS_DISAGREE)] if cells.flag(row.get("clock_flag")) else []
    if row.get("speed_clock") == "client":
        notes.append(_badge("client", CLIENT_CLOCK))
    return escape(cells.interval(row.get("speedup"), row.get("ci_low"),
                                 row.get("ci_high"))) + "".join(notes)


def _busy_cell(row: Mapping[Any, Any]) -> str:
    return escape("; ".join(cells.block_notes(row)))


def _flags_cell(row: Mapping[Any, Any]) -> str:
    """One varying flag per line, never broken inside a flag."""
    return "<br>".join(f'<span class="flags">{escape(flag)}</span>'
                       for flag in cells.text(row.get("varying_flags")).split())


# Each per-job column's cell on the page (farm.columns.JOB_TABLE: headers, order, ranks).
JOB_CELLS: dict[str, Cell] = {
    "job": lambda row: escape(cells.text(row.get("job_key"))[:10]),
    "model": plain("model"),
    "variant": lambda row: escape(cells.variant(row)),
    "varying flags": _flags_cell,
    "baseline tok/s": number("baseline_tok_s", cells.number),
    "variant tok/s": number("variant_tok_s", cells.number),
    "speedup [95% CI]": _speedup_cell,
    "pairs": number("pairs", cells.count),
    "stop reason": plain("stop_reason"),
    "accept": number("acceptance_rate", cells.percent),
    "mean accepted length": number("mean_accepted_length", lambda v: cells.number(v, 2)),
    "agree": _agreement_cell,
    "drift": _drift_cell,
    "node": _busy_cell,
    "draft / verify ms/tok": lambda row: escape(cells.time_split(
        row.get("draft_ms_per_token"), row.get("verify_ms_per_token"))),
    "memory MiB": lambda row: escape(cells.memory_cost(row.get("memory_cost_mb"),
                                                       row.get("draft_context_mib"))),
}
_JOB_RANKS = {column.header: column.html_rank for column in table_columns("html")}


def _job_columns(jobs: pd.DataFrame) -> list[tuple[str, Cell, bool]]:
    """(header, cell renderer, numeric) for the per-job table; a campaign column first when
    its rows come from several, the mean accepted length where the rows have it."""
    several = "campaign" in jobs.columns and jobs["campaign"].nunique() > 1
    return [*([("campaign", plain("campaign"), False)] if several else []),
            *((column.header, JOB_CELLS[column.header], column.numeric)
              for column in table_columns("html")
              if column.header != "mean accepted length"
              or "mean_accepted_length" in jobs.columns)]


def table(frame: pd.DataFrame, columns: list[tuple[str, Cell, bool]], empty: str,
           ranks: Mapping[str, int] | None = None) -> str:
    """``frame``'s rows as an HTML table of ``columns`` (header, cell, numeric), each cell
    classed by its header's rank in ``ranks``; ``empty`` where it has no rows."""
    if frame.empty:
        return f"<p><em>{escape(empty)}</em></p>"

    def classes(header: str, numeric: bool) -> str:
        names = " ".join(filter(None, ("num" if numeric else "",
                                       f"r{(ranks or {}).get(header, 0)}")))
        return f' class="{names}"'

    head = "".join(f"<th{classes(header, False)}>{escape(header)}</th>"
                   for header, _, _ in columns)
    body = []
    for row in frame.to_dict(orient="records"):
        tds = "".join(f"<td{classes(header, numeric)}>{cell(row)}</td>"
                      for header, cell, numeric in columns)
        body.append(f"<tr>{tds}</tr>")
    return (f'<div class="scroll"><table>\n<thead><tr>{head}</tr></thead>\n<tbody>\n'
            + "\n".join(body) + "\n</tbody>\n</table></div>")


def jobs_table(jobs: pd.DataFrame) -> str:
    """The per-job table as HTML; a narrow window hides its least needed columns, named
    in a note that shows only then."""
    columns = _job_columns(jobs)
    # One note per width the CSS hides at (rank 2 below 1800 px, rank 1 too below 1100),
    # each naming what that width hides and shown only at it.
    notes = ""
    for rank in (2, 1):
        hidden = [header for header, _, _ in columns if _JOB_RANKS.get(header, 0) >= rank]
        if hidden:
            notes += (f'<p class="narrow-note hides-r{rank}">This window hides '
                      f'{escape(", ".join(hidden))} (widen it, or run '
                      "<code>farm report --wide</code>).</p>")
    return table(jobs, columns, "No jobs.", _JOB_RANKS) + ("" if jobs.empty else notes)


def sheet_table(sheet: Sheet) -> str:
    """A text report's sheet (``farm report --group-by``'s) as an HTML table with its title:
    the same cells, its lower-ranked columns hidden in a narrow window as the jobs' are."""
    ranks = {column.header: min(column.rank, 2) for column in sheet.columns}
    frame = pd.DataFrame({column.header: list(texts)
                          for column, texts in zip(sheet.columns, sheet.texts, strict=True)})
    columns = [(column.header, plain(column.header), column.numeric)
               for column in sheet.columns]
    return (f"<h2>{escape(sheet.title[:1].upper() + sheet.title[1:])}</h2>\n"
            + table(frame, columns, "No rows.", ranks))


def categories_table(categories: pd.DataFrame) -> str:
    """The per-category table (job_key, model, variant, category, estimate, low, high, pairs)
    with each row's verdict against 1x (q: the false discovery rate across the rows)."""
    columns: list[tuple[str, Cell, bool]] = [
        ("job", lambda row: escape(cells.text(row.get("job_key"))[:10]), False),
        ("model", plain("model"), False),
        ("variant", plain("variant"), False),
        ("category", plain("category"), False),
        ("speedup", lambda row: escape(cells.interval(row.get("estimate"), row.get("low"),
                                                      row.get("high"))), True),
        ("pairs", number("pairs", cells.count), True),
        ("q", number("q_value", lambda value: cells.number(value, 3)), True),
        ("verdict", plain("verdict"), False),
    ]
    return table(categories, columns, "No per-category estimates.")
