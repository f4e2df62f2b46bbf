"""``farm history`` rendered: a table per job (a row per build with the campaign its job
came from, a column per series, each value with its interval, a mark where the test called
a change), the changes in words, as terminal tables, markdown, JSON and one self-contained
HTML page with a trend plot per series (the interval as a band, changes marked). The
tables and markdown fold acceptance positions past ``POSITIONS_SHOWN`` unless asked for
every position (``--wide``), and end in a line that says what the acceptance columns
measure (``acceptance_legend``).

Frames, as ``farm.results.history.History`` holds them: builds (order, build, commit,
build_number), jobs (key, label, order, campaign), points (key, series, series_label,
order, build, campaign, value, low, high), changes (key, series, series_label, build_b,
order_b, change, verdict), described (key, order_b, build_a, build_b, moved, text).
"""

from __future__ import annotations

import base64
import io
import json
from datetime import UTC, datetime
from html import escape
from typing import Any, Protocol

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from farm.report import cells
from farm.report.sheet import Column, Sheet, text_of


class HistoryFrames(Protocol):
    """What a history holds (``farm.results.history.History``)."""

    @property
    def builds(self) -> pd.DataFrame:
        """Builds in commit order."""

    @property
    def jobs(self) -> pd.DataFrame:
        """One job per key and build, with its campaign."""

    @property
    def points(self) -> pd.DataFrame:
        """Each series per build."""

    @property
    def changes(self) -> pd.DataFrame:
        """Each series between consecutive builds."""

    @property
    def described(self) -> pd.DataFrame:
        """A sentence per transition."""


# The mark of a build whose value the test called changed from the build before.
MARKS = {"regression": "\u25bc", "improvement": "\u25b2"}
_COLOURS = {"regression": "tab:red", "improvement": "tab:green"}
_PANEL_PX, _COLUMNS, _DPI = 260, 3, 100
# Acceptance positions a table shows unless asked for every one: an n-gram drafter's
# reach a dozen, which would push every other series off the terminal.
POSITIONS_SHOWN = 4
_ACCEPTANCE = "acceptance_"


def _position(series: str) -> int:
    """The draft position of an acceptance series (``acceptance_3``: 3), 0 for another."""
    return int(series.removeprefix(_ACCEPTANCE)) if series.startswith(_ACCEPTANCE) else 0


def _digits(series: str) -> int:
    if series.startswith(_ACCEPTANCE) or series == "mean_accepted_length":
        return 2
    return 3 if series.endswith("ms_per_token") else 1


def value_cell(series: str, value: Any, low: Any, high: Any) -> str:
    """``1.32x [1.28, 1.36]``, ``12.3 [11.9, 12.8]``: a point and its interval."""
    if series == "speedup":
        return cells.interval(value, low, high)
    digits = _digits(series)
    shown = cells.number(value, digits)
    known = not (cells.missing(low) or cells.missing(high))
    return f"{shown} [{cells.number(low, digits)}, {cells.number(high, digits)}]" if known \
        else shown


def _keys(jobs: pd.DataFrame) -> list[tuple[str, str]]:
    """(key, label) of each job of the history, by label."""
    first = jobs.drop_duplicates("key").sort_values("label")
    return list(zip(first["key"], first["label"], strict=True))


def wide(history: HistoryFrames, key: str, *, every_position: bool = True) -> pd.DataFrame:
    """One job's history as text cells: a row per build (build, number, the campaign of
    its job), a column per series label, the value with its interval and the change mark;
    acceptance positions past ``POSITIONS_SHOWN`` only with ``every_position``."""
    points, changes = history.points, history.changes
    mine = points[points["key"] == key]
    if not every_position:
        mine = mine[mine["series"].map(_position) <= POSITIONS_SHOWN]
    verdicts = {(row["series"], row["order_b"]): row["verdict"]
                for row in changes[changes["key"] == key].to_dict(orient="records")}
    jobs = history.jobs[history.jobs["key"] == key]
    campaigns = dict(zip(jobs["order"], jobs["campaign"], strict=True))
    labels = list(dict.fromkeys(mine["series_label"]))
    rows = []
    for build in history.builds.to_dict(orient="records"):
        here = mine[mine["order"] == build["order"]]
        if here.empty:
            continue
        row = {"build": build["build"], "number": cells.count(build["build_number"]),
               "campaign": str(campaigns.get(build["order"], cells.MISSING))}
        row |= dict.fromkeys(labels, cells.MISSING)
        for point in here.to_dict(orient="records"):
            mark = MARKS.get(verdicts.get((point["series"], build["order"]), ""), "")
            row[point["series_label"]] = (value_cell(point["series"], point["value"],
                                                     point["low"], point["high"]) + mark)
        rows.append(row)
    return pd.DataFrame(rows, columns=["build", "number", "campaign", *labels])


def _sentences(described: pd.DataFrame, key: str) -> list[str]:
    mine = described[described["key"] == key].sort_values("order_b")
    return [f"{row['build_a']} -> {row['build_b']}: {row['text']}"
            for row in mine.to_dict(orient="records")]


def acceptance_legend(history: HistoryFrames, *, every_position: bool = True) -> str | None:
    """The line under the tables that says what the acceptance columns measure, and which
    positions are folded (``every_position`` False); None where no job has them."""
    series = set(history.points["series"])
    last = max(map(_position, series), default=0)
    parts = []
    if last:
        parts.append(f"acceptance {_span(1, last)}: the share of drafts accepted at each "
                     "draft position")
    if "mean_accepted_length" in series:
        parts.append("acceptance length: the mean accepted length per draft, (accepted + "
                     "drafts) / drafts")
    if not parts:
        return None
    parts[-1] += " (not the report's accept, accepted over drafted tokens)"
    if last > POSITIONS_SHOWN and not every_position:
        parts.append(f"{_span(POSITIONS_SHOWN + 1, last)} folded (--wide shows them)")
    return "; ".join(parts)


def _span(first: int, last: int) -> str:
    return f"@{first}..@{last}" if last > first else f"@{first}"


def history_sheets(history: HistoryFrames, title: str, *,
                   every_position: bool = True) -> list[Sheet]:
    """A table per job of ``history`` (its frames), the changes as its caption: the build,
    its campaign and each series always, the build number first to go; acceptance
    positions past ``POSITIONS_SHOWN`` only with ``every_position``."""
    sheets = []
    for key, label in _keys(history.jobs):
        frame = wide(history, key, every_position=every_position)
        columns = [Column(str(name), text_of(name), numeric=name not in ("build", "campaign"),
                          rank=1 if name == "number" else 0)
                   for name in frame.columns]
        sheets.append(Sheet(f"{title}: {label} (key {key[:12]})", columns,
                            frame.to_dict(orient="records"),
                            "\n".join(_sentences(history.described, key)) or None))
    return sheets


def history_markdown(history: HistoryFrames, title: str, *,
                     every_position: bool = True) -> str:
    """The history as markdown: a table per job, then its changes as a list; the
    acceptance legend last. Each line is cleaned of control characters (the store's
    names), as a table's cells are."""
    out = [f"# {title}", "", f"Changes marked {MARKS['regression']} (regression) and "
           f"{MARKS['improvement']} (improvement) by the difference test, false discovery "
           "rate 5% across every series and build.", ""]
    for key, label in _keys(history.jobs):
        frame = wide(history, key, every_position=every_position)
        out += [f"## {label}", "", f"Comparable key `{key}`.", ""]
        out.append("| " + " | ".join(map(str, frame.columns)) + " |")
        out.append("|" + "---|" * len(frame.columns))
        out += ["| " + " | ".join(str(value) for value in row) + " |"
                for row in frame.itertuples(index=False)]
        out += ["", *(f"- {sentence}" for sentence in _sentences(history.described, key)),
                ""]
    legend = acceptance_legend(history, every_position=every_position)
    return "\n".join(cells.clean(line) for line in ([*out, legend, ""] if legend else out))


def history_json(history: HistoryFrames) -> str:
    """The history's frames as one JSON object (NaN as null)."""
    def records(frame: pd.DataFrame) -> Any:
        return json.loads(frame.to_json(orient="records", date_format="iso",
                                        double_precision=15))

    return json.dumps({name: records(getattr(history, name))
                       for name in ("builds", "jobs", "points", "changes", "described")},
                      indent=1)


def trend_plot(points: pd.DataFrame, changes: pd.DataFrame, builds: pd.DataFrame) -> bytes:
    """One job's series as panels: the value per build, its interval as a band, a called
    change marked at the build it entered (red: regression, green: improvement). PNG."""
    labels = list(dict.fromkeys(points["series_label"]))
    rows = max(1, -(-len(labels) // _COLUMNS))
    fig = Figure(figsize=(900 / _DPI, rows * _PANEL_PX / _DPI), dpi=_DPI)
    FigureCanvasAgg(fig)
    names = dict(zip(builds["order"], builds["build"], strict=True))
    for index, label in enumerate(labels):
        ax = fig.add_subplot(rows, _COLUMNS, index + 1)
        series = points[points["series_label"] == label].sort_values("order")
        x = series["order"].astype(int).to_numpy()
        ax.fill_between(x, series["low"].astype(float), series["high"].astype(float),
                        alpha=0.25, color="tab:blue", linewidth=0)
        ax.plot(x, series["value"].astype(float), "o-", color="tab:blue", markersize=4)
        called = changes[(changes["series_label"] == label)
                         & changes["verdict"].isin(list(_COLOURS))]
        for change in called.to_dict(orient="records"):
            ax.axvline(float(change["order_b"]) - 0.5, color=_COLOURS[change["verdict"]],
                       linestyle="--", linewidth=1.2)
            ax.annotate(f"{(float(change['change']) - 1) * 100:+.0f}%",
                        (float(change["order_b"]) - 0.5, 1.0), xycoords=("data", "axes fraction"),
                        ha="center", va="bottom", fontsize=8, color=_COLOURS[change["verdict"]])
        ax.set_xticks(list(x), [names[order][:8] for order in x], fontsize=7)
        ax.set_title(label, fontsize=9, pad=12)
        ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=_DPI, metadata={"Software": None})
    return buffer.getvalue()


_CSS = """body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px;
padding: 0 1em; color: #222; } table { border-collapse: collapse; font-size: 0.85em; }
th, td { border: 1px solid #ddd; padding: 0.25em 0.5em; white-space: nowrap; }
th { background: #f3f4f6; } img { max-width: 100%; } .note { color: #555; }"""

_GUIDE = (
    "Each row is a build, in commit order (llama.cpp's build number, then the date of its "
    "first run), and the campaign of the job it shows (the latest job of the key on that "
    "build, from any campaign); each value is a mean over the job's blocks (server "
    "sessions) with its 95% interval, the speedup the job's own crossover estimate. A "
    "change between consecutive builds is the difference test on the log scale (Welch), "
    "called at a false discovery rate of 5% across every series and build shown: \u25bc a "
    "regression (a fall, or a cost's rise), \u25b2 an improvement. In the plots the band "
    "is the interval and a dashed line marks a called change at the build it entered.")


def history_html(history: HistoryFrames, title: str,
                 generated_at: datetime | None = None) -> str:
    """The history as one self-contained page: per job its table, its changes in words and
    its trend plot."""
    when = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S %Z")
    legend = acceptance_legend(history)
    guide = _GUIDE + (f" {legend[0].upper()}{legend[1:]}." if legend else "")
    sections = []
    for key, label in _keys(history.jobs):
        frame = wide(history, key)
        head = "".join(f"<th>{escape(str(column))}</th>" for column in frame.columns)
        body = "".join("<tr>" + "".join(f"<td>{escape(str(value))}</td>" for value in row)
                       + "</tr>" for row in frame.itertuples(index=False))
        items = "".join(f"<li>{escape(text)}</li>"
                        for text in _sentences(history.described, key))
        png = trend_plot(history.points[history.points["key"] == key],
                         history.changes[history.changes["key"] == key], history.builds)
        sections.append(
            f"<section><h2>{escape(label)}</h2><p class=\"note\">comparable key "
            f"<code>{escape(key)}</code></p><table><thead><tr>{head}</tr></thead><tbody>"
            f"{body}</tbody></table><ul>{items}</ul><figure><img alt=\"trend per series\" "
            f"src=\"data:image/png;base64,{base64.b64encode(png).decode()}\"></figure>"
            "</section>")
    return (f"<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>"
            f"{escape(title)}</title><style>{_CSS}</style></head><body><h1>{escape(title)}"
            f"</h1><p class=\"note\">Generated {escape(when)}</p><p>{escape(guide)}</p>"
            + "\n".join(sections) + "</body></html>\n")
