"""One self-contained HTML page for a campaign: tables, embedded PNG plots, a reading guide.

No external resources: CSS is inline and the plots are ``data:image/png;base64`` URIs, so
the file can be mailed or opened offline. All text taken from the frames is escaped. Its
tables come from ``farm.report.html_tables``; this module lays out the page and its other
sections.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape

import pandas as pd

from farm.report import cells, plots
from farm.report.headline import headlines, provenance
from farm.report.html_tables import (
    Cell,
    categories_table,
    jobs_table,
    number,
    plain,
    sheet_table,
    table,
)
from farm.report.sheet import Sheet
from farm.report.where_ran import where_sheet

_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 2em auto;
       max-width: 1200px; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { margin-bottom: 0.1em; }
.generated { color: #666; margin-top: 0; }
.headline { font-size: 1.15em; font-weight: 600; padding-left: 1.2em; }
.provenance { color: #555; font-size: 0.9em; }
h2 { border-bottom: 1px solid #ddd; padding-bottom: 0.2em; margin-top: 1.8em; }
table { border-collapse: collapse; width: 100%; font-size: 0.9em; margin: 0.8em 0; }
th, td { border: 1px solid #ddd; padding: 0.3em 0.55em; text-align: left; vertical-align: top; }
th { background: #f3f4f6; }
td { overflow-wrap: anywhere; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap;
         overflow-wrap: normal; }
.flags { font-size: 0.95em; }
.scroll { overflow-x: auto; }
/* A narrow window hides the jobs table's least needed columns (rank 2, then 1) instead of
   scrolling; other tables scroll inside their own box, never the page. */
@media (max-width: 1799px) { .r2 { display: none; } }
@media (max-width: 1099px) { .r1 { display: none; } }
@media (min-width: 1800px) { .narrow-note { display: none; } }
@media (max-width: 1099px) { .hides-r2 { display: none; } }
@media (min-width: 1100px) { .hides-r1 { display: none; } }
.narrow-note { color: #666; font-size: 0.85em; }
tbody tr:nth-child(even) { background: #fafafa; }
code { font-size: 0.95em; }
.badge { display: inline-block; border-radius: 0.7em; padding: 0 0.55em; font-size: 0.8em;
         font-weight: 600; margin-left: 0.3em; }
.badge.suspect { background: #fde2e1; color: #a4161a; }
.badge.drift { background: #ffedd5; color: #9a3412; }
.badge.clock { background: #fde2e1; color: #a4161a; }
.badge.client { background: #e0f2fe; color: #075985; }
.notes { background: #fffbea; border-left: 4px solid #f0c000; padding: 0.5em 1em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #555; font-size: 0.9em; }
dt { font-weight: 600; margin-top: 0.5em; }
"""

_PLOT_CAPTIONS = {
    "speedup_intervals": "Speedup per configuration with its interval; dotted line = no "
                         "change. Colour/marker flags agreement-suspect and drifting jobs.",
    "speedup_vs_draft_length": "Speedup against draft length, one line per model and "
                               "speculation type.",
    "acceptance_vs_speedup": "Draft acceptance rate against speedup.",
    "tok_s_over_blocks": "Median decode tok/s per block for each job arm; a trend over "
                         "blocks means the machine drifted (thermal, clocks, contention).",
}

_GUIDE = (
    ("Speedup", "Geometric mean over prompts of variant / baseline decode tok/s. 1.00x means "
                "no change; above 1 the variant is faster."),
    ("Interval", "95% interval from a crossover model over counterbalanced baseline/variant "
                 "block pairs (log scale; an order effect is estimated, not counted as noise). "
                 "Wide intervals or few pairs mean the estimate is uncertain."),
    ("Acceptance", "Accepted / drafted tokens, from the server's speculative-decoding "
                   "counters. Empty when the variant drafts nothing."),
    ("Draft / verify", "The variant's decode time per token split by llama-server's own "
                       "timers: drafting, and the rest (the target verifying the drafts, "
                       "sampling, and for draft-mtp the MTP head's pass over each verified "
                       "batch, which llama.cpp does not time apart)."),
    ("Agreement", "Share of the variant's outputs identical to the baseline's for the same "
                  "prompt. Speculative decoding should not change greedy output; a low "
                  "share is marked suspect."),
    ("Drift", "Decode speed trended across blocks, so the machine was not steady during "
              "the job (thermal, clocks, contention); read its speedup with care."),
)


def _figures(jobs: pd.DataFrame, runs: pd.DataFrame) -> str:
    parts = []
    for name, png in plots.render_all(jobs, runs).items():
        data = base64.b64encode(png).decode("ascii")
        caption = escape(_PLOT_CAPTIONS.get(name, name))
        parts.append(f'<figure><img src="data:image/png;base64,{data}" alt="{escape(name)}" '
                     f'width="{plots.WIDTH_PX}">\n<figcaption>{caption}</figcaption></figure>')
    return "\n".join(parts)


@dataclass(frozen=True)
class EngineCurve:
    """An engine cost curve as the page draws it (``farm.results.curve``): its table,
    points and fitted lines."""

    table: pd.DataFrame
    points: pd.DataFrame
    fits: pd.DataFrame


@dataclass(frozen=True)
class Recommendation:
    """``farm recommend``'s picks, the candidates they came from, and the curve they used."""

    picks: pd.DataFrame
    candidates: pd.DataFrame
    curve: EngineCurve | None


def _engine_curve(curve: EngineCurve | None) -> str:
    """The engine cost curve of the synthetic-acceptance jobs, if there are any."""
    if curve is None or curve.points.empty:
        return ""

    def fit(value: str, low: str, high: str) -> Cell:
        return lambda row: escape(cells.interval(row.get(value), row.get(low),
                                                 row.get(high)).replace(cells.TIMES, ""))

    columns: list[tuple[str, Cell, bool]] = [
        ("model", plain("model"), False), ("GPU class", plain("gpu_class"), False),
        ("build", plain("build"), False), ("spec type", plain("spec_type"), False),
        ("n-max", number("draft_n_max", cells.count), True),
        ("points", number("points", cells.count), True),
        ("step cost (plain steps)", fit("step_cost", "step_cost_low", "step_cost_high"), True),
        ("break-even length", fit("break_even", "break_even_low", "break_even_high"), True),
    ]
    data = base64.b64encode(plots.engine_curve(curve.points, curve.fits)).decode("ascii")
    return f"""<section>
<h2>Engine cost curve (synthetic acceptance)</h2>
{table(curve.table, columns, "No curve.")}
<figure><img src="data:image/png;base64,{data}" alt="engine_curve" width="{plots.WIDTH_PX}">
<figcaption>{escape(_ENGINE_CURVE_CAPTION)}</figcaption></figure>
</section>"""


_ENGINE_CURVE_CAPTION = (
    "Speedup against the mean acceptance length (tokens per speculative step, the target's "
    "included) that synthetic acceptance forced, one line per draft length with its fit; "
    "the mark on 1x is the break-even length with its 95% interval. Step cost: one step "
    "with n-max drafted tokens, all accepted, in plain decode steps.")


def _recommendation(found: Recommendation | None) -> str:
    """``farm recommend``'s answer with its evidence, when the store has what it needs."""
    if found is None or found.candidates.empty:
        return ""

    columns: list[tuple[str, Cell, bool]] = [
        ("GPU class", plain("gpu_class"), False), ("model", plain("model"), False),
        ("category", plain("category"), False), ("use", plain("recommended"), False),
        ("predicted", lambda row: escape(cells.interval(row.get("speedup"), row.get("low"),
                                                        row.get("high"))), True),
        ("runner-up", plain("runner_up"), False), ("why", plain("why"), False),
    ]
    figures = [plots.recommendation(found.candidates)]
    if found.curve is not None and not found.curve.points.empty:
        figures.append(plots.engine_curve(found.curve.points, found.curve.fits))
    images = "\n".join(
        f'<figure><img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" '
        f'alt="recommendation" width="{plots.WIDTH_PX}"></figure>' for png in figures)
    return f"""<section>
<h2>Recommendation</h2>
<p>{escape(_RECOMMENDATION_NOTE)}</p>
{table(found.picks, columns, "Nothing to recommend.")}
{images}
</section>"""


_RECOMMENDATION_NOTE = (
    "Predicted from each drafter's measured acceptance per position (this campaign) and the "
    "engine cost curve of the same build, model, GPU class and spec type (synthetic-"
    "acceptance jobs in the store), with a 95% interval over both. `farm recommend "
    "--write-matrix verify.yaml` writes the matrix that checks it; `farm recommend --check` "
    "compares.")


def _traffic(jobs: pd.DataFrame) -> str:
    """Speedup against concurrency and prompt length, for campaigns that sweep either."""
    streams = "concurrency" in jobs and bool((jobs["concurrency"].fillna(1) > 1).any())
    lengths = "varying" in jobs and bool(jobs["varying"].map(
        lambda varying: "prompt-length" in (varying or {})).any())
    if not (streams or lengths):
        return ""

    def interval(value: str, low: str, high: str) -> Cell:
        return lambda row: escape(cells.interval(row.get(value), row.get(low), row.get(high)))

    columns: list[tuple[str, Cell, bool]] = [
        ("model", plain("model"), False), ("variant", plain("variant"), False),
        ("varying flags", lambda row: f"<code>{plain('varying_flags')(row)}</code>", False),
        ("streams", number("concurrency", cells.count), True),
        ("prompt tokens", number("prompt_tokens", lambda v: cells.number(v, 0)), True),
        ("per request", interval("speedup", "ci_low", "ci_high"), True),
        ("aggregate", interval("aggregate_speedup", "aggregate_ci_low", "aggregate_ci_high"),
         True),
        ("overlap (least)", number("overlap_min", cells.percent), True),
        ("prompt tok/s base / var", lambda row: escape(
            f"{cells.number(row.get('prompt_tok_s_baseline'), 0)} / "
            f"{cells.number(row.get('prompt_tok_s_variant'), 0)}"), True),
        ("slots low", lambda row: escape(", ".join(map(str, row.get("low_slots") or []))),
         False),
    ]
    shown = jobs[jobs["kind"] == "variant"] if "kind" in jobs else jobs
    figures = [plots.speedup_vs_traffic(jobs, axis) for axis, swept in
               (("concurrency", streams), ("prompt_tokens", lengths)) if swept]
    images = "\n".join(
        f'<figure><img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" '
        f'alt="traffic" width="{plots.WIDTH_PX}"></figure>' for png in figures)
    return f"""<section>
<h2>Traffic: concurrency and prompt length</h2>
<p>{escape(_TRAFFIC_NOTE)}</p>
{table(shown, columns, "No jobs.")}
{images}
</section>"""


_TRAFFIC_NOTE = (
    "Per request: the speedup of each stream's decode tok/s (the mean over a run's "
    "streams), what one user feels. Aggregate: the speedup of the tokens all streams "
    "delivered per second of their decode window, what the server delivers. Both are 95% "
    "intervals over block pairs. Overlap: the least share of a run's window in which every "
    "stream was decoding. A slot is listed low when its acceptance is below the other "
    "slots' by more than 5 points (a test at 5% over all slots).")


def _guide() -> str:
    items = "".join(f"<dt>{escape(term)}</dt><dd>{escape(text)}</dd>" for term, text in _GUIDE)
    return f"<dl>{items}</dl>"


def _notes(notes: list[str] | None) -> str:
    if not notes:
        return ""
    items = "".join(f"<li>{escape(note)}</li>" for note in notes)
    return f'<section class="notes"><ul>{items}</ul></section>'


def _where_ran(runs: pd.DataFrame) -> str:
    sheet = where_sheet(runs)  # nothing, not even a line, where every job ran in one place
    return "" if sheet is None else f"\n<section>{sheet_table(sheet)}</section>"


def _headline(jobs: pd.DataFrame, runs: pd.DataFrame) -> str:
    answers = "".join(f"<li>{escape(line)}</li>" for line in headlines(jobs))
    where = " · ".join(map(escape, provenance(runs)))
    return ((f'<ul class="headline" id="headline">{answers}</ul>' if answers else "")
            + (f'<p class="provenance">{where}</p>' if where else ""))


def render_html(title: str, jobs: pd.DataFrame, categories: pd.DataFrame, runs: pd.DataFrame,
                notes: list[str] | None = None, generated_at: datetime | None = None,
                curve: EngineCurve | None = None,
                recommendation: Recommendation | None = None,
                groups: Sheet | None = None) -> str:
    """Render the whole report as one self-contained HTML document, opening with its
    answer (``farm.report.headline``) and where it was measured; ``groups`` (``--group-by``)
    comes before the jobs, a ``curve`` adds its section, a ``recommendation`` (``farm
    recommend``'s) its own."""
    when = (generated_at or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S %Z").strip()
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{_CSS}</style>
</head>
<body>
<header>
<h1>{escape(title)}</h1>
<p class="generated">Generated {escape(when)}</p>
{_headline(jobs, runs)}
</header>
{_notes(notes)}
{f"<section>{sheet_table(groups)}</section>" if groups is not None else ""}
<section>
<h2>Jobs</h2>
{jobs_table(jobs)}
</section>{_where_ran(runs)}
<section>
<h2>Per prompt category</h2>
{categories_table(categories)}
</section>
<section>
<h2>Plots</h2>
{_figures(jobs, runs)}
</section>
{_traffic(jobs)}
{_engine_curve(curve)}
{_recommendation(recommendation)}
<section>
<h2>How to read this</h2>
{_guide()}
</section>
</body>
</html>
"""
