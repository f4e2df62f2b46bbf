"""``farm board show`` and ``farm board site``: the board (``kinds.Board``) as a fitted
text table, markdown a README can include or JSON, each through the format registry
(``farm.report.formats``); the helpers every output shares (cells, columns, the order of
rows, ``escape``). The static site is ``farm.report.board_site``'s, built on these.

What each frame holds is ``farm.stats.board``'s (``ROW_COLUMNS``, ``BEST_COLUMNS``) and
``farm.board.view``'s (``BUNDLE_COLUMNS``); this module reads them as frames and never
recomputes a figure. Two settings, two model files or two GPUs are rows apart already;
builds are a range column, never a key that averages rows together.

Everything a bundle carries (model names, settings, campaigns) comes from strangers: every
output removes control characters from it (``farm.report.cells.clean``: the text tables
through their sheets, the markdown and the site through ``escape``), the markdown escapes
HTML in it, the site escapes every string.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from farm.report import cells
from farm.report.sheet import Column, Row, Sheet

if TYPE_CHECKING:
    import pandas as pd

    from farm.report.kinds import Board

SCHEMA, VERSION = "specfarm-board", 2

# What the intervals mean, in the words every output uses (docs/board.md says more).
ROWS_NOTE = ("speedup, decode tok/s: the typical machine's with this GPU and backend, 95% "
             "interval with machines as random effects; 1*: one machine, the interval is "
             "its own (how well it was measured, not how machines differ); builds: the "
             "llama.cpp builds behind the row (settings and model files are never averaged "
             "together)")
BEST_NOTE = ("best: the setting with the highest speedup, its interval allowing for having "
             "picked the best of m settings; it beats the runner-up when its lead holds at "
             "95% over the m - 1 others (Bonferroni)")
PREDICTED_NOTE = ("predicted: `farm recommend`'s prediction for the setting from each "
                  "machine's own acceptance and engine cost curve (its bundles' engine-curve "
                  "jobs), machines pooled as the speedup is; a dash: no engine curve for it")
ONE_MACHINE = "*"
EMPTY = ("no job on the board yet: `farm board add BUNDLE...` takes the bundles `farm share` "
         "makes")


# --- cells: one value of a row as text, the same in every output ------------------------

def gpu_cell(row: Row) -> str:
    """``H200 · 140 GiB (CUDA)``; the backend alone where it is the GPU (``CPU``)."""
    gpu, backend = cells.text(row["gpu"]), cells.text(row["backend"])
    return gpu if not backend or backend == gpu else f"{gpu} ({backend})"


def speedup_cell(row: Row) -> str:
    """``1.42\u00d7 [1.35, 1.50]``."""
    return cells.interval(row["speedup"], row["low"], row["high"])


def decode_cell(row: Row) -> str:
    """``52.3 [48.1, 56.9]``: decode tok/s, the bracket only where there is an interval."""
    low, high = cells.as_float(row["decode_low"]), cells.as_float(row["decode_high"])
    estimate = cells.number(row["decode_tok_s"])
    if math.isnan(low) or math.isnan(high) or estimate == cells.MISSING:
        return estimate
    return f"{estimate} [{low:.1f}, {high:.1f}]"


def acceptance_cell(row: Row) -> str:
    """``71%``."""
    return cells.percent(row["acceptance"], 0)


def vram_cell(row: Row) -> str:
    """``+312``: MiB the variant holds beyond the baseline."""
    value = cells.as_float(row["vram_cost_mb"])
    return cells.MISSING if math.isnan(value) else f"{value:+.0f}"


def energy_cell(row: Row) -> str:
    """``0.412``: joules per token."""
    return cells.number(row["joules_per_token"], 3)


def predicted_cell(row: Row) -> str:
    """``1.69\u00d7 [1.52, 1.88]``: ``farm recommend``'s prediction for the row's setting."""
    return cells.interval(row.get("predicted"), row.get("predicted_low"),
                          row.get("predicted_high"))


def recommended_cell(row: Row) -> str:
    """``--spec-draft-n-max 2 --spec-type draft-mtp (1.69\u00d7 [1.52, 1.88])``: the setting
    ``farm recommend`` predicts fastest for the best's model and GPU; empty without one."""
    if cells.missing(row.get("recommended")):
        return ""
    predicted = cells.interval(row["recommended_speedup"], row["recommended_low"],
                               row["recommended_high"])
    return f"{cells.text(row['recommended'])} ({predicted})"


def predicts(frame: pd.DataFrame, column: str) -> bool:
    """Whether any row of ``frame`` has ``column`` (a prediction): its column is shown."""
    return column in frame.columns and bool(frame[column].notna().any())


def machines_cell(row: Row) -> str:
    """``3``; ``1*`` where the interval is one machine's own."""
    count = cells.count(row["machines"])
    return count + ONE_MACHINE if cells.flag(row.get("one_machine")) else count


def builds_cell(row: Row) -> str:
    """``b4500-b4620``, ``b4500`` for one build."""
    low, high = cells.as_float(row["build_min"]), cells.as_float(row["build_max"])
    if math.isnan(low) or math.isnan(high):
        return cells.MISSING
    return f"b{int(low)}" if low == high else f"b{int(low)}-b{int(high)}"


def draft_cell(row: Row) -> str:
    """The draft length, or a dash."""
    return cells.count(row["draft_n_max"])


def settings_count(row: Row) -> int:
    """m: the settings the best was picked from."""
    value = cells.as_float(row["settings"])
    return 0 if math.isnan(value) else int(value)


def runner_up_cell(row: Row) -> str:
    """``--spec-draft-n-max 4 (1.31\u00d7)``; empty with no runner-up."""
    if settings_count(row) <= 1 or cells.missing(row["runner_up"]):
        return ""
    return f"{row['runner_up']} ({cells.ratio(row['runner_up_speedup'])})"


def verdict_cell(row: Row, runner_up: str = "") -> str:
    """Best of how many, and whether it beats the runner-up (named when ``runner_up`` is
    given), with the lead and its interval."""
    settings = settings_count(row)
    if settings <= 1:
        return "best of 1: the only setting measured"
    lead = cells.interval(row["ahead"], row["ahead_low"], row["ahead_high"])
    named = f"the runner-up {runner_up}" if runner_up else "the runner-up"
    if cells.flag(row["beats"]):
        return f"best of {settings}; beats {named}: {lead} ahead"
    return f"best of {settings}; not shown to beat {named}: {lead}"


def model_labels(*frames: pd.DataFrame) -> dict[Hashable, str]:
    """Each model's name to show; with the start of its sha256 where two model files share
    a name (a different file is a different model)."""
    names: dict[Hashable, str] = {}
    for frame in frames:
        for model, name in zip(frame["model"], frame["model_name"], strict=True):
            names.setdefault(model, cells.text(name) or cells.text(model))
    shared = [name for name in set(names.values()) if list(names.values()).count(name) > 1]
    return {model: f"{name} · {str(model)[:8]}" if name in shared else name
            for model, name in names.items()}


# --- sheets: the terminal's tables -------------------------------------------------------

def _model(row: Row) -> str:
    return str(row["model_label"])


def _text(key: str) -> Callable[[Row], str]:
    return lambda row: cells.text(row[key])


# Model and GPU go first on a narrow terminal: the tables then split by them, each titled
# with its model and GPU.
_SPLITS = 9
ROW_COLUMNS = (
    Column("model", _model, rank=_SPLITS, splits=True),
    Column("GPU", gpu_cell, rank=_SPLITS, splits=True),
    Column("setting", _text("setting")),
    Column("speedup [95% CI]", speedup_cell, True),
    Column("machines", machines_cell, True),
    Column("decode tok/s [95% CI]", decode_cell, True, rank=3),
    Column("accept", acceptance_cell, True, rank=1),
    Column("builds", builds_cell, True, rank=2),
    Column("VRAM MiB", vram_cell, True, rank=4),
    Column("J/token", energy_cell, True, rank=4),
    Column("jobs", lambda row: cells.count(row["jobs"]), True, rank=5),
)
PREDICTED_COLUMN = Column("predicted [95% CI]", predicted_cell, True, rank=3)
# One best per model and GPU: a table each would be a line each, so they share a column.
BEST_COLUMNS = (
    Column("model · GPU", lambda row: f"{_model(row)} · {gpu_cell(row)}"),
    Column("best setting", _text("setting")),
    Column("speedup [best-of-m]", speedup_cell, True),
    Column("verdict", verdict_cell),
    Column("machines", lambda row: cells.count(row["machines"]), True, rank=1),
    Column("builds", builds_cell, True, rank=2),
    Column("runner-up", runner_up_cell, rank=3),
)
RECOMMENDED_COLUMN = Column("farm recommend predicts", recommended_cell, rank=3)
BUNDLE_COLUMNS = (
    Column("bundle", lambda row: str(row["sha256"])[:12]),
    Column("machine", lambda row: str(row["machine"])[:12], rank=2),
    Column("signed", _text("signed"), rank=1),
    Column("campaigns", lambda row: campaigns_text(row["campaigns"]), rank=3),
    Column("jobs", lambda row: cells.count(row["jobs"]), True),
    Column("runs", lambda row: cells.count(row["runs"]), True, rank=2),
    Column("refused", lambda row: cells.count(row["refused"]), True),
    Column("differences", lambda row: cells.count(row["differences"]), True, rank=1),
)


def row_columns(board: Board) -> tuple[Column, ...]:
    """The rows' columns: the prediction beside the speedup where any row has one."""
    if not predicts(board.rows, "predicted"):
        return ROW_COLUMNS
    return (*ROW_COLUMNS[:4], PREDICTED_COLUMN, *ROW_COLUMNS[4:])


def best_columns(board: Board) -> tuple[Column, ...]:
    """The best settings' columns, ``farm recommend``'s pick last where any has one."""
    return (*BEST_COLUMNS, RECOMMENDED_COLUMN) if predicts(board.best, "recommended") \
        else BEST_COLUMNS


def rows_note(board: Board) -> str:
    """What the rows' intervals (and predictions, where shown) mean."""
    return f"{ROWS_NOTE}; {PREDICTED_NOTE}" if predicts(board.rows, "predicted") else ROWS_NOTE


def campaigns_text(value: Any) -> str:
    """A bundle's campaigns, comma separated."""
    if isinstance(value, str):
        return value
    try:
        return ", ".join(str(name) for name in value)
    except TypeError:
        return cells.text(value)


def ordered_rows(board: Board) -> pd.DataFrame:
    """The rows with each model's name to show (``model_label``), by model, GPU, backend,
    then speedup, highest first (a setting without one last)."""
    labels = model_labels(board.rows, board.best)
    rows = board.rows.assign(model_label=board.rows["model"].map(labels),
                             _speedup=board.rows["speedup"].map(cells.as_float))
    return rows.sort_values(["model_label", "gpu", "backend", "_speedup", "setting"],
                            ascending=[True, True, True, False, True],
                            na_position="last", kind="stable").drop(columns="_speedup")


def ordered_best(board: Board) -> pd.DataFrame:
    """The best settings with ``model_label``, by model, GPU and backend."""
    labels = model_labels(board.rows, board.best)
    best = board.best.assign(model_label=board.best["model"].map(labels))
    return best.sort_values(["model_label", "gpu", "backend"], kind="stable")


def board_sheets(board: Board) -> list[Sheet]:
    """The best setting per model x GPU, every setting's row, then the bundles (alone,
    saying how to fill the board, while it has no job)."""
    def records(frame: pd.DataFrame) -> list[Row]:
        return frame.to_dict(orient="records")  # type: ignore[return-value]

    title = board.title
    bundles = Sheet(f"{title}: bundles", BUNDLE_COLUMNS, records(board.bundles),
                    None if len(board.rows) else EMPTY)
    if not len(board.rows):
        return [bundles]
    return [Sheet(f"{title}: best setting per model and GPU", best_columns(board),
                  records(ordered_best(board)), BEST_NOTE),
            Sheet(f"{title}: every setting", row_columns(board), records(ordered_rows(board)),
                  rows_note(board)), bundles]


def board_text(board: Board, width: int | None) -> str:
    """The board's tables fitted to ``width`` (``farm.report.sheet``)."""
    from farm.report.sheet import table_text

    return table_text(board_sheets(board), width)


# --- markdown and HTML -------------------------------------------------------------------

def escape(text: str, quote: bool = True) -> str:
    """Text that may come from a bundle as HTML text: control characters removed (a page
    or a README shown in a terminal acts on none), then HTML escaped."""
    return html.escape(cells.clean(text), quote)


def md(text: str) -> str:
    """Text from a bundle as a markdown table cell: control characters removed, HTML
    escaped (a README renders inline HTML), pipes and asterisks escaped, one line."""
    return escape(text, quote=False).replace("|", "\\|").replace("*", "\\*")


def _md_table(columns: Sequence[Column], rows: Sequence[Row]) -> list[str]:
    return ["| " + " | ".join(md(column.header) for column in columns) + " |",
            "|" + "|".join("---:" if column.numeric else "---" for column in columns) + "|",
            *("| " + " | ".join(md(column.cell(row)) for column in columns) + " |"
              for row in rows)]


def best_line(best: Row | None) -> str:
    """The best setting of a model x GPU in one line (plain text)."""
    if best is None:
        return "no setting has a speedup yet"
    line = (f"best: {cells.text(best['setting'])} at {speedup_cell(best)}, "
            f"{verdict_cell(best, runner_up_cell(best))}; "
            f"{cells.count(best['machines'])} machines, builds {builds_cell(best)}")
    recommended = recommended_cell(best)
    return f"{line}; farm recommend predicts {recommended}" if recommended else line


def board_markdown(board: Board) -> str:
    """Per model x GPU a heading, the best setting's line, then each setting's row; then
    the bundles. A table a README can include."""
    out = [f"## {md(board.title)}", ""]
    best = {_key(row): row for row in ordered_best(board).to_dict(orient="records")}
    rows = ordered_rows(board).to_dict(orient="records")
    columns = [column for column in row_columns(board) if not column.splits]
    for key in dict.fromkeys(_key(row) for row in rows):
        mine: list[Row] = [row for row in rows if _key(row) == key]
        out += [f"### {md(_model(mine[0]))} \u00b7 {md(gpu_cell(mine[0]))}", "",
                f"**{md(best_line(best.get(key)))}**", "",
                *_md_table(columns, mine), ""]
    note = f"_{md(rows_note(board))}. {md(BEST_NOTE)}._" if rows else md(EMPTY[0].upper()
                                                                 + EMPTY[1:]) + "."
    out += [note, "", f"### {md(board.title)}: bundles", "",
            *_md_table(BUNDLE_COLUMNS, board.bundles.to_dict(orient="records")), ""]
    return "\n".join(out)


def _key(row: Mapping[Hashable, Any]) -> tuple[str, str, str]:
    return str(row["model"]), str(row["gpu"]), str(row["backend"])


# --- JSON --------------------------------------------------------------------------------

def board_json(board: Board) -> str:
    """Rows, best settings, ``farm recommend``'s predictions and bundles as records under a
    schema header; NaN as null."""
    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(frame.to_json(
            orient="records", date_format="iso", double_precision=15))
        return found

    return json.dumps({"schema": SCHEMA, "version": VERSION, "title": board.title,
                       "rows": records(board.rows), "best": records(board.best),
                       "predictions": records(board.predictions),
                       "bundles": records(board.bundles)}, indent=1)
