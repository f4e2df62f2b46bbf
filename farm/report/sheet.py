"""Every table the farm prints, as data (``Sheet``): fitted to a terminal, or as markdown.

The fitter never cuts a number and never shortens a name without a mark. On a narrow
terminal it drops the least needed columns first (each column's ``rank``: 0 always stays,
then 1, 2, ... while they fit) and says which in one line under the table; text wraps at
spaces, and a word still longer than its column ends in "…". When even the columns that
always stay cannot fit, the table is printed wider than the terminal rather than cut. A
hidden column that says where a row belongs (model, GPU class) splits the table into one
per value, so rows that look alike are never left unexplained.

A table on a terminal that shows colour (``terminal_colour``: ``NO_COLOR``, then
``FORCE_COLOR``, then whether stdout is a terminal) colours the cells of a column with a
``tone``; without the colour it reads the same, and nothing else (a pipe, a file, markdown)
is ever coloured.

rich loads where a table is drawn, not with this module.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from farm.report.cells import clean, clean_lines

if TYPE_CHECKING:
    import pandas as pd
    from rich.table import Table

Row = Mapping[Hashable, Any]

# Rich's default box: one rule between columns and at both edges, one space of padding.
_BORDER_PER_COLUMN, _BORDER_EDGE = 3, 1
# Wrapped text narrower than this stacks into more lines than it is worth.
_WRAP_MIN = 20
# A name is shortened (with "…") to no fewer characters than this.
_NAME_MIN = 10
ELLIPSIS = "\u2026"
_DOT = " \u00b7 "  # between a split table's title and the values it holds


@dataclass(frozen=True)
class Column:
    """One column of a table and how it gives way on a narrow terminal."""

    header: str
    cell: Callable[[Row], str]
    numeric: bool = False  # right-justified, never wrapped, never cut
    rank: int = 0  # a narrow terminal shows rank 0, then ranks 1, 2, ... while they fit
    # Names where a row belongs (its model, its GPU class): hidden while rows differ in it,
    # the table splits into one per value, its title naming the value.
    splits: bool = False
    # The colour a row's cell takes in a terminal that shows colour (``terminal_colour``):
    # a style name such as "green", or None for none.
    tone: Callable[[Row], str | None] | None = None


@dataclass(frozen=True)
class Sheet:
    """A titled table: its columns, its rows (records the columns read) and a note."""

    title: str
    columns: Sequence[Column]
    rows: Sequence[Row]
    caption: str | None = None
    texts: list[list[str]] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        # Cells, headers, title and caption may hold a stranger's text (a bundle's GPU
        # name, a flag, a campaign's name): each is cleaned of control characters once,
        # here, for every format.
        object.__setattr__(self, "title", clean(self.title))
        object.__setattr__(self, "columns", [replace(column, header=clean(column.header))
                                             for column in self.columns])
        if self.caption is not None:
            object.__setattr__(self, "caption", clean_lines(self.caption))
        object.__setattr__(self, "texts", [[clean(column.cell(row)) for row in self.rows]
                                           for column in self.columns])


def text_of(key: Hashable) -> Callable[[Row], str]:
    """A cell that is the row's ``key`` as text."""
    return lambda row: str(row[key])


def frame_sheet(title: str, columns: Sequence[Column], frame: pd.DataFrame,
                caption: str | None = None) -> Sheet:
    """A sheet of ``frame``'s rows; a campaign column first when they come from several."""
    if "campaign" in frame and frame["campaign"].nunique() > 1:
        columns = (Column("campaign", lambda row: str(row["campaign"])), *columns)
    return Sheet(title, columns, frame.to_dict(orient="records"), caption)


def plain_sheet(title: str, headers: Sequence[str], rows: Sequence[Sequence[object]],
                caption: str | None = None) -> Sheet:
    """A sheet of ready-made text cells, one column per header."""
    columns = [Column(header, text_of(i)) for i, header in enumerate(headers)]
    return Sheet(title, columns, [dict(enumerate(row)) for row in rows], caption)


def terminal_width() -> int | None:
    """The terminal's width (``COLUMNS`` first); None in a pipe: tables at their natural
    width, unpadded."""
    if "COLUMNS" in os.environ:
        try:
            return max(int(os.environ["COLUMNS"]), 20)
        except ValueError:
            return None
    if sys.stdout.isatty():
        return os.get_terminal_size().columns
    return None


def terminal_colour() -> bool:
    """Whether a table fitted to the terminal may be coloured: never where ``NO_COLOR`` is
    set to anything (https://no-color.org), always where ``FORCE_COLOR`` is, else when
    stdout is a terminal."""
    if os.environ.get("NO_COLOR"):
        return False
    return bool(os.environ.get("FORCE_COLOR")) or sys.stdout.isatty()


def fit(sheet: Sheet, width: int | None = None, *, note: bool = True,
        colour: bool = False) -> Table:
    """``sheet`` as a rich table within ``width`` columns of terminal (every column at its
    natural width if None); ``note``: name the hidden columns under it; ``colour``: each
    cell in its column's ``tone``."""
    needs = _needs(sheet)
    shown = _shown(sheet, needs, width)
    hidden = [column.header for i, column in enumerate(sheet.columns) if i not in shown]
    notes = [sheet.caption] if sheet.caption else []
    if hidden and note:
        notes.append(f"hidden at {width} columns: {', '.join(hidden)} (--wide shows them)")
    widths = None if width is None else _widths(sheet, shown, needs, width)
    return _table(sheet, shown, widths, "\n".join(notes) or None, colour)


def _needs(sheet: Sheet) -> list[int]:
    return [_need(column, texts) for column, texts in zip(sheet.columns, sheet.texts,
                                                         strict=True)]


def _shown(sheet: Sheet, needs: Sequence[int], width: int | None) -> list[int]:
    """The columns shown at ``width``: every one without a width. A column of the next rank
    shows only where the ones before it keep their need: names are not wrapped word by
    word, nor shortened, to make room for it."""
    if width is None:
        return list(range(len(sheet.columns)))
    return _ranked(sheet.columns, needs, width)


def split(sheet: Sheet, width: int | None) -> list[Sheet]:
    """``sheet`` as one table per value of the ``splits`` columns ``width`` hides while its
    rows differ in them (in the order rows first show each value), each titled with its
    values and only the last keeping the caption; else ``sheet`` alone."""
    shown = _shown(sheet, _needs(sheet), width)
    keys = [i for i, column in enumerate(sheet.columns)
            if column.splits and i not in shown and len(set(sheet.texts[i])) > 1]
    if not keys:
        return [sheet]
    parts: dict[tuple[str, ...], list[int]] = {}
    for row in range(len(sheet.rows)):
        parts.setdefault(tuple(sheet.texts[i][row] for i in keys), []).append(row)
    last = len(parts) - 1
    return [Sheet(_DOT.join((sheet.title, *values)), sheet.columns,
                  [sheet.rows[row] for row in rows], sheet.caption if n == last else None)
            for n, (values, rows) in enumerate(parts.items())]


def _ranked(columns: Sequence[Column], needs: Sequence[int], width: int) -> list[int]:
    """The columns that fit, most needed first: rank 0 always, then each rank whole."""
    ranks = {0}
    for rank in sorted({column.rank for column in columns} - ranks):
        tried = [i for i, column in enumerate(columns) if column.rank in ranks | {rank}]
        if _outer(len(tried)) + sum(needs[i] for i in tried) <= width:
            ranks.add(rank)
    return [i for i, column in enumerate(columns) if column.rank in ranks]


def _outer(columns: int) -> int:
    return _BORDER_EDGE + _BORDER_PER_COLUMN * columns


def _need(column: Column, texts: Sequence[str]) -> int:
    """Characters a column needs not to cut a cell nor stack wrapped text into a tall
    strip: a number's whole width; text's longest word, or up to ``_WRAP_MIN``."""
    from rich.cells import cell_len

    pieces = [column.header, *texts]
    longest = max(map(cell_len, pieces))
    if column.numeric:
        return longest
    word = max((cell_len(word) for piece in pieces for word in piece.split()), default=0)
    return max(word, min(longest, _WRAP_MIN))


def _natural(sheet: Sheet, i: int) -> int:
    from rich.cells import cell_len

    return max(cell_len(line) for piece in [sheet.columns[i].header, *sheet.texts[i]]
               for line in piece.splitlines() or [""])


def _widths(sheet: Sheet, shown: Sequence[int], needs: Sequence[int],
            width: int) -> dict[int, int]:
    """A width per shown column within ``width``: wrapped text narrowed to its longest
    word, then names shortened (longest first, never below ``_NAME_MIN``) while the table
    is too wide; then text grown toward its natural width with what is left, the most
    needed columns first."""
    widths = {i: needs[i] for i in shown}
    room = width - _outer(len(shown))
    texts = [i for i in shown if not sheet.columns[i].numeric]
    for i in texts:
        if sum(widths.values()) > room:
            widths[i] = max(_longest_word(sheet, i), widths[i] - (sum(widths.values()) - room))
    while sum(widths.values()) > room:
        widest = max(texts, key=lambda i: widths[i], default=None)
        if widest is None or widths[widest] <= _NAME_MIN:
            break  # printed wider than the terminal: numbers are never cut
        widths[widest] -= 1
    for i in sorted(texts, key=lambda i: sheet.columns[i].rank):
        spare = room - sum(widths.values())
        if spare <= 0:
            break
        widths[i] += max(0, min(spare, _natural(sheet, i) - widths[i]))
    return widths


def _longest_word(sheet: Sheet, i: int) -> int:
    from rich.cells import cell_len

    return max((cell_len(word) for piece in [sheet.columns[i].header, *sheet.texts[i]]
                for word in piece.split()), default=1)


def shorten(text: str, width: int) -> str:
    """``text`` with each word longer than ``width`` shortened in the middle with "…", so
    that both ends (a sweep's varying value is at the end) stay readable."""
    def word(piece: str) -> str:
        if len(piece) <= width:
            return piece
        head = (width - 1) // 2
        return piece[:head] + ELLIPSIS + piece[len(piece) - (width - 1 - head):]
    return "\n".join(" ".join(map(word, line.split(" "))) for line in text.split("\n"))


def _table(sheet: Sheet, shown: Sequence[int], widths: Mapping[int, int] | None,
           caption: str | None, colour: bool) -> Table:
    from rich.table import Table
    from rich.text import Text

    # Text, not markup: a variant named "ngram[spec-draft-n-max=8]" is not a style tag. No
    # style but the cells' tones: a coloured table reads as the plain one does.
    table = Table(title=Text(sheet.title), title_justify="left", caption=caption,
                  caption_justify="left", header_style="none", title_style="none",
                  caption_style="none")
    for i in shown:
        column = sheet.columns[i]
        table.add_column(Text(column.header), justify="right" if column.numeric else "left",
                         no_wrap=column.numeric, overflow="ellipsis",
                         width=None if widths is None else widths[i])
    for number, row in enumerate(zip(*(sheet.texts[i] for i in shown), strict=True)):
        table.add_row(*(Text(text if widths is None or sheet.columns[i].numeric
                             else shorten(text, widths[i]),
                             style=_tone(sheet.columns[i], sheet.rows[number], colour))
                        for i, text in zip(shown, row, strict=True)))
    return table


def _tone(column: Column, row: Row, colour: bool) -> str:
    return (column.tone(row) or "") if colour and column.tone is not None else ""


def table_text(sheets: Sequence[Sheet], width: int | None, *,
               colour: bool | None = None) -> str:
    """The sheets as text tables, fitted to ``width``, no trailing spaces; ``colour``: the
    columns' tones as terminal colours (default: where the tables are fitted to a
    terminal that shows colour, ``terminal_colour``; never at their natural width, as in
    a file or with ``--wide``)."""
    from rich.console import Console

    if colour is None:
        colour = width is not None and terminal_colour()
    out = io.StringIO()
    parts = [(part, n == len(split_up) - 1) for sheet in sheets
             for split_up in [split(sheet, width)] for n, part in enumerate(split_up)]
    for sheet, last in parts:
        table = fit(sheet, width, note=last, colour=colour)
        console = Console(file=out, width=10_000, color_system="standard" if colour else None,
                          force_terminal=colour, no_color=False, highlight=False)
        natural = console.measure(table).maximum
        console.width = max(width or 0, natural)
        console.print(table)
    return "".join(line.rstrip() + "\n" for line in out.getvalue().splitlines())


def markdown(sheets: Sequence[Sheet]) -> str:
    """The sheets as markdown tables (every column), each under its title."""
    out: list[str] = []
    for sheet in sheets:
        out += [f"### {_md(sheet.title)}", "",
                "| " + " | ".join(_md(column.header) for column in sheet.columns) + " |",
                "|" + "|".join("---:" if column.numeric else "---"
                               for column in sheet.columns) + "|"]
        out += ["| " + " | ".join(map(_md, row)) + " |" for row in zip(*sheet.texts, strict=True)]
        if sheet.caption:
            out += ["", _md(sheet.caption)]
        out.append("")
    return "\n".join(out)


def _md(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", "<br>")
