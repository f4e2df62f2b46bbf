"""The board's static site (``farm board site``), as pages of text: ``index.html`` (models x
GPUs, the best setting of each), ``models/<id>.html`` (a model's rows per GPU and a plot of
speedup against draft length) and ``bundles/<id>.html`` (a bundle's machine, signature and
counts). An id is the first 16 hex digits of the model's or bundle's sha256.

Plain files: no script, no external resource, CSS inline, links relative, so any static
host (or a file:// URL) serves them. Every number on a model page links to the bundles
behind it. Every string is escaped: a bundle is a stranger's, and its model name or setting
may hold markup. A page never scrolls sideways: a wide table scrolls inside its own box.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from farm.report import board_plot, cells
from farm.report.board import (
    BEST_NOTE,
    acceptance_cell,
    best_line,
    builds_cell,
    campaigns_text,
    decode_cell,
    draft_cell,
    energy_cell,
    escape,
    gpu_cell,
    machines_cell,
    ordered_best,
    ordered_rows,
    predicted_cell,
    predicts,
    recommended_cell,
    rows_note,
    runner_up_cell,
    speedup_cell,
    verdict_cell,
    vram_cell,
)
from farm.report.output import Folder
from farm.report.sheet import Row
from farm.words import plural

if TYPE_CHECKING:
    from farm.report.kinds import Board

_CSS = """
*, *::before, *::after { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 0.8em 1.1em 3em; color: #1f2328;
       font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
h1, h2, p, li, dd { overflow-wrap: anywhere; }
h1 { font-size: 1.55em; margin: 0.3em 0 0.1em; }
h2 { font-size: 1.2em; margin: 1.8em 0 0.5em; border-bottom: 1px solid #d0d7de; }
a { color: #0550ae; }
nav { font-size: 0.9em; }
.meta, .note, figcaption { color: #59636e; font-size: 0.9em; }
.box { overflow-x: auto; max-width: 100%; margin: 0.6em 0; }
table { border-collapse: collapse; font-size: 0.9em; width: 100%; }
th, td { padding: 0.3em 0.55em; border-bottom: 1px solid #e3e6ea; text-align: left;
         vertical-align: top; }
th { background: #f4f6f8; }
td { overflow-wrap: break-word; }
.flag { white-space: nowrap; }
th.n, td.n { text-align: right; }
td.n { white-space: nowrap; font-variant-numeric: tabular-nums; }
td.long { min-width: 16em; }
tr.top td { background: #eef6ff; }
.tag { font-size: 0.75em; font-weight: 600; background: #0969da; color: #fff;
       border-radius: 0.6em; padding: 0 0.5em; margin-left: 0.4em; white-space: nowrap; }
.best { background: #f6f8fa; border-left: 4px solid #0969da; padding: 0.45em 0.9em;
        margin: 0.6em 0; overflow-wrap: anywhere; }
.best details { display: inline-block; }
code { font-size: 0.92em; word-break: break-all; }
figure { margin: 1em 0; }
figure svg { display: block; width: 100%; max-width: 760px; height: auto; }
ul.legend { list-style: none; padding: 0; margin: 0.4em 0; display: flex; flex-wrap: wrap;
            gap: 0.2em 1.3em; }
.swatch { display: inline-block; width: 0.85em; height: 0.85em; border-radius: 2px;
          margin-right: 0.35em; vertical-align: -0.08em; }
details summary { cursor: pointer; white-space: nowrap; }
dl { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: 0.2em 1em; }
dt { font-weight: 600; }
dd { margin: 0; }
"""

# A row's bundles shown as a link in its cell; more fold under a summary ("3 bundles").
_SHOWN_BUNDLES = 1


def page_id(value: object) -> str:
    """A model's or bundle's file name: its sha256's first 16 hex digits (a hash of the
    text where it is not one)."""
    text = cells.text(value)
    if re.fullmatch(r"[0-9a-f]{16,}", text):
        return text[:16]
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def bundle_ids(value: Any) -> list[str]:
    """A row's bundle ids (a list in the frame; one id as text)."""
    if isinstance(value, str):
        return [value]
    return [str(item) for item in value] if isinstance(value, Iterable) else []


def _section(row: Row) -> str:
    """The anchor of a model page's GPU section."""
    return "gpu-" + page_id(f"{row['gpu']}\0{row['backend']}")[:10]


def board_site(board: Board) -> Folder:
    """The board as plain HTML files: its index, a page per model and per bundle."""
    pages = site_pages(board)
    models = sum(name.startswith("models/") for name in pages)
    bundles = sum(name.startswith("bundles/") for name in pages)
    return Folder({name: page.encode("utf-8") for name, page in pages.items()},
                  f"index.html, {plural(models, 'model page')}, "
                  f"{plural(bundles, 'bundle page')}")


def site_pages(board: Board) -> dict[str, str]:
    """Every page of the site, by its path inside the site's folder."""
    rows: list[Row] = ordered_rows(board).to_dict(orient="records")  # type: ignore[assignment]
    best: list[Row] = ordered_best(board).to_dict(orient="records")  # type: ignore[assignment]
    bundles: list[Row] = board.bundles.to_dict(orient="records")  # type: ignore[assignment]
    pages = {"index.html": _index(board.title, rows, best, bundles,
                                  predicts(board.best, "recommended"))}
    for model in dict.fromkeys(str(row["model"]) for row in rows):
        mine = [row for row in rows if str(row["model"]) == model]
        pages[f"models/{page_id(model)}.html"] = _model_page(
            board, mine, [row for row in best if str(row["model"]) == model])
    listed = {str(bundle["sha256"]): bundle for bundle in bundles}
    behind = [sha for row in rows for sha in bundle_ids(row["bundles"])]
    for sha in dict.fromkeys([*listed, *behind]):
        pages[f"bundles/{page_id(sha)}.html"] = _bundle_page(
            board.title, sha, listed.get(sha),
            [row for row in rows if sha in bundle_ids(row["bundles"])])
    return pages


# --- the frame of every page -------------------------------------------------------------

def _page(site: str, title: str, body: Sequence[str], depth: int) -> str:
    up = "../" * depth
    nav = "" if depth == 0 else (f'<nav><a href="{up}index.html">\u2190 {escape(site)}</a>'
                                 "</nav>")
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            '<meta name="viewport" content="width=device-width, initial-scale=1">'
            f"<title>{escape(title)}</title><style>{_CSS}</style></head>\n<body>{nav}\n"
            + "\n".join(body) + "\n</body></html>\n")


_HtmlCell = Callable[[Row], str]  # a cell's HTML, escaped


def _table(headers: Sequence[tuple[str, str]], rows: Iterable[Sequence[str]],
           classes: Iterable[str] = ()) -> str:
    """A table in its scroll box: ``headers`` (text, its cells' class: ``n`` a number,
    ``long`` long text, empty for the rest), rows of cells' HTML, and a class per row."""
    kinds = [f' class="{kind}"' if kind else "" for _, kind in headers]
    head = "".join(f"<th{kind}>{escape(header)}</th>"
                   for (header, _), kind in zip(headers, kinds, strict=True))
    marks = iter(classes)
    body = "".join(
        f'<tr class="{next(marks, "")}">' + "".join(
            f"<td{kind}>{cell}</td>" for cell, kind in zip(row, kinds, strict=True)) + "</tr>"
        for row in rows)
    return (f'<div class="box"><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody>'
            "</table></div>")


def _link(href: str, text: str) -> str:
    return f'<a href="{href}">{escape(text)}</a>'


# --- the index ---------------------------------------------------------------------------

def _index(site: str, rows: list[Row], best: list[Row], bundles: list[Row],
           predicted: bool) -> str:
    models = dict.fromkeys(str(row["model"]) for row in rows)
    machines = {str(bundle["machine"]) for bundle in bundles}
    body = [f"<h1>{escape(site)}</h1>",
            f'<p class="meta">{plural(len(models), "model")}, '
            f'{plural(len(bundles), "bundle")} from {plural(len(machines), "machine")}. '
            "Every figure is the board's own, computed from the bundles' runs.</p>",
            "<h2>Best setting per model and GPU</h2>"]
    if rows:
        body += [_best_table(rows, best, predicted),
                 f'<p class="note">{escape(BEST_NOTE)}.</p>']
    else:
        body.append('<p class="note">Nothing on the board yet: <code>farm board add '
                    "BUNDLE...</code> takes the bundles <code>farm share</code> makes.</p>")
    body += ["<h2>Bundles</h2>", _bundles_table(bundles)]
    return _page(site, site, body, 0)


def _best_table(rows: list[Row], best: list[Row], predicted: bool) -> str:
    """One row per model x GPU x backend, its best setting or why it has none; with
    ``predicted``, ``farm recommend``'s pick beside it."""
    found = {_group(row): row for row in best}
    groups = dict.fromkeys(_group(row) for row in rows)
    first = {_group(row): row for row in reversed(rows)}
    lines = []
    for group in groups:
        row, pick = first[group], found.get(group)
        page = f"models/{page_id(row['model'])}.html"
        named = [_link(page, str(row["model_label"])),
                 _link(f"{page}#{_section(row)}", gpu_cell(row))]
        if pick is None:
            lines.append([*named, "", escape(cells.MISSING), "no setting has a speedup yet",
                          "", "", *([""] if predicted else [])])
            continue
        lines.append([*named, setting_html(pick["setting"]),
                      _link(f"{page}#{_section(row)}", speedup_cell(pick)),
                      escape(verdict_cell(pick, runner_up_cell(pick))),
                      escape(cells.count(pick["machines"])), escape(builds_cell(pick)),
                      *([escape(recommended_cell(pick))] if predicted else [])])
    headers = [("model", ""), ("GPU", ""), ("best setting", ""),
               ("speedup [best-of-m 95% CI]", "n"), ("verdict", "long"), ("machines", "n"),
               ("builds", "n"), *([("farm recommend predicts", "long")] if predicted else [])]
    return _table(headers, lines)


def _group(row: Row) -> tuple[str, str, str]:
    return str(row["model"]), str(row["gpu"]), str(row["backend"])


def _bundles_table(bundles: list[Row]) -> str:
    lines = [[_link(f"bundles/{page_id(bundle['sha256'])}.html", str(bundle["sha256"])[:12]),
              escape(str(bundle["machine"])[:12]), escape(cells.text(bundle["signed"])),
              escape(campaigns_text(bundle["campaigns"])),
              *(escape(cells.count(bundle[key]))
                for key in ("jobs", "runs", "refused", "differences"))]
             for bundle in bundles]
    headers = [("bundle", ""), ("machine", ""), ("signed", ""), ("campaigns", "long"),
               ("jobs", "n"), ("runs", "n"), ("refused", "n"), ("differences", "n")]
    return _table(headers, lines)


# --- a model's page ----------------------------------------------------------------------

def _numbers(text: Callable[[Row], str]) -> _HtmlCell:
    """A number's cell, linking to the first bundle behind the row."""
    def cell(row: Row) -> str:
        shown, ids = text(row), bundle_ids(row["bundles"])
        if shown == cells.MISSING or not ids:
            return escape(shown)
        return _link(f"../bundles/{page_id(ids[0])}.html", shown)
    return cell


def _bundle_links(row: Row) -> str:
    ids = bundle_ids(row["bundles"])
    links = " ".join(_link(f"../bundles/{page_id(sha)}.html", sha[:8]) for sha in ids)
    if len(ids) <= _SHOWN_BUNDLES:
        return links
    return f"<details><summary>{len(ids)} bundles</summary>{links}</details>"


def setting_html(setting: Any) -> str:
    """A setting's flags, each with its value kept on one line (a line breaks between
    flags, never inside one)."""
    groups: list[list[str]] = []
    for word in cells.text(setting).split():
        if word.startswith("-") or not groups:
            groups.append([])
        groups[-1].append(word)
    return " ".join(f'<span class="flag">{escape(" ".join(group))}</span>'
                    for group in groups)


def _setting(best: Row | None) -> _HtmlCell:
    def cell(row: Row) -> str:
        text = setting_html(row["setting"])
        top = best is not None and cells.text(best["setting"]) == cells.text(row["setting"])
        return text + ('<span class="tag">best</span>' if top else "")
    return cell


_PREDICTED_CELL = ("predicted [95% CI]", "n", _numbers(predicted_cell))
_ROW_CELLS: tuple[tuple[str, str, _HtmlCell], ...] = (
    ("draft length", "n", _numbers(draft_cell)),
    ("speedup [95% CI]", "n", _numbers(speedup_cell)),
    ("machines", "n", _numbers(machines_cell)),
    ("decode tok/s [95% CI]", "n", _numbers(decode_cell)),
    ("accept", "n", _numbers(acceptance_cell)),
    ("VRAM MiB", "n", _numbers(vram_cell)),
    ("J/token", "n", _numbers(energy_cell)),
    ("jobs", "n", _numbers(lambda row: cells.count(row["jobs"]))),
    ("builds", "n", _numbers(builds_cell)),
    ("bundles", "", _bundle_links),
)


def _model_page(board: Board, rows: list[Row], best: list[Row]) -> str:
    site, label = board.title, str(rows[0]["model_label"])
    shown = ((*_ROW_CELLS[:2], _PREDICTED_CELL, *_ROW_CELLS[2:])
             if predicts(board.rows, "predicted") else _ROW_CELLS)
    groups = dict.fromkeys(_group(row) for row in rows)
    picks = {_group(row): row for row in best}
    body = [f"<h1>{escape(label)}</h1>",
            f'<p class="meta">model file sha256 <code>{escape(cells.text(rows[0]["model"]))}'
            f"</code>; {len(groups)} GPUs, {len(rows)} rows.</p>",
            _plot(label, rows, list(groups))]
    for group in groups:
        mine = [row for row in rows if _group(row) == group]
        pick = picks.get(group)
        body += [f'<h2 id="{_section(mine[0])}">{escape(gpu_cell(mine[0]))}</h2>',
                 _best_paragraph(pick),
                 _table([("setting", ""), *((head, kind) for head, kind, _ in shown)],
                        [[_setting(pick)(row), *(cell(row) for _, _, cell in shown)]
                         for row in mine],
                        ["top" if pick is not None and row["setting"] == pick["setting"]
                         else "" for row in mine])]
    body.append(f'<p class="note">{escape(rows_note(board))}. {escape(BEST_NOTE)}.</p>')
    return _page(site, f"{label} \u00b7 {site}", body, 1)


def _best_paragraph(pick: Row | None) -> str:
    """The best setting's line; its speedup links to the bundles behind it."""
    if pick is None:
        return f'<div class="best">{escape(best_line(None))}</div>'
    text = escape(best_line(pick))
    speedup = escape(speedup_cell(pick))
    linked = _numbers(speedup_cell)(pick)
    return (f'<div class="best">{text.replace(speedup, linked, 1)} '
            f"{_bundle_links(pick)}</div>")


def _plot(label: str, rows: list[Row], groups: list[tuple[str, str, str]]) -> str:
    """The figure: the SVG, its legend, and a caption naming the rows left out."""
    lines, left_out = [], []
    for n, group in enumerate(groups):
        points = []
        for row in (row for row in rows if _group(row) == group):
            draft = cells.as_float(row["draft_n_max"])
            if math.isnan(draft):
                left_out.append(f"{cells.text(row['setting'])} on {gpu_cell(row)}")
                continue
            points.append(board_plot.Point(
                draft, cells.as_float(row["speedup"]), cells.as_float(row["low"]),
                cells.as_float(row["high"]), f"{cells.text(row['setting'])}: "
                f"{speedup_cell(row)}, {machines_cell(row)} machines"))
        gpu = gpu_cell(next(row for row in rows if _group(row) == group))
        lines.append(board_plot.Line(gpu, board_plot.colour(n), points))
    svg = board_plot.speedup_svg(lines, f"{label}: speedup against draft length per GPU")
    legend = "".join(f'<li><span class="swatch" style="background:{line.colour}"></span>'
                     f"{escape(line.name)}</li>" for line in lines if line.points)
    caption = ("Speedup against draft length, one line per GPU through its best setting at "
               "each length; bars: 95% intervals; dashed: no change (1\u00d7).")
    if not svg:
        caption = "No row has a draft length: nothing to plot."
    if left_out:
        caption += (f" Left out of the plot, without a draft length: "
                    f"{'; '.join(left_out)}.")
    return (f'<figure>{svg}<ul class="legend">{legend}</ul>'
            f"<figcaption>{escape(caption)}</figcaption></figure>")


# --- a bundle's page ---------------------------------------------------------------------

def _bundle_page(site: str, sha: str, bundle: Row | None, rows: list[Row]) -> str:
    body = [f"<h1>bundle {escape(sha[:12])}</h1>"]
    if bundle is None:
        body.append('<p class="note">Not among the board\'s bundles (rows name it).</p>')
        facts = [("sha256", f"<code>{escape(sha)}</code>")]
    else:
        facts = [("sha256", f"<code>{escape(sha)}</code>"),
                 ("machine", f"<code>{escape(cells.text(bundle['machine']))}</code>"),
                 ("signed", escape(cells.text(bundle["signed"]))),
                 ("campaigns", escape(campaigns_text(bundle["campaigns"]))),
                 ("jobs", escape(cells.count(bundle["jobs"]))),
                 ("runs", escape(cells.count(bundle["runs"]))),
                 ("jobs refused", escape(cells.count(bundle["refused"]))),
                 ("stated summaries that differ", escape(cells.count(bundle["differences"]))),
                 ("created", escape(cells.text(bundle["created_at"]))),
                 ("added to the board", escape(cells.text(bundle["added_at"])))]
    body.append("<dl>" + "".join(f"<dt>{escape(name)}</dt><dd>{value}</dd>"
                                 for name, value in facts) + "</dl>")
    body.append(f"<h2>Rows it is behind ({len(rows)})</h2>")
    items = "".join(
        f'<li><a href="../models/{page_id(row["model"])}.html#{_section(row)}">'
        f"{escape(str(row['model_label']))} \u00b7 {escape(gpu_cell(row))} \u00b7 "
        f"{escape(cells.text(row['setting']))}</a>: {escape(speedup_cell(row))}</li>"
        for row in rows)
    body.append(f"<ul>{items}</ul>" if items else '<p class="note">None.</p>')
    return _page(site, f"bundle {sha[:12]} \u00b7 {site}", body, 1)
