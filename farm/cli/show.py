"""What ``farm report``, ``farm compare``, ``farm curve``, ``farm recommend`` and ``farm
export`` print or write: frames loaded from the store (``farm.results``), rendered in the
format asked for (``farm.report``).

``farm report --format json`` prints the per-job rows without pandas, numpy, rich or yaml
(most of its time in a cold process was loading them): they load where they are used.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import ConfigError
from farm.report.headline import headlines, with_headlines
from farm.report.legend import job_legend
from farm.report.output import emit, sheets_text, write_file
from farm.report.sheet import terminal_width
from farm.report.text import (
    category_sheet,
    check_sheet,
    compare_sheet,
    curve_sheets,
    group_sheet,
    job_sheet,
    recommendation_sheets,
    rows_to_json,
    to_json,
)
from farm.results.groups import category_report, category_summary, group_report, with_design_columns
from farm.results.rows import job_report, job_rows, report_frame
from farm.results.runs import designs_of, draft_lengths_of, job_specs, runs_frame
from farm.settings import Settings
from farm.store.campaigns import latest_campaign
from farm.store.db import open_store

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd
    from sqlalchemy import Engine

    from farm.report.html import EngineCurve, Recommendation
    from farm.report.sheet import Sheet
    from farm.stats.design import Design


def show_report(settings: Settings, campaign: str | None, fmt: str, *,
                all_campaigns: bool = False, group_by: str | None = None,
                by_category: bool = False, output: Path | None = None,
                wide: bool = False) -> None:
    """The jobs of ``campaign`` (default the latest) per job, per group or per category."""
    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        rows = job_rows(engine, name)
        runs = runs_frame(engine, name) if by_category or fmt == "html" else None
        # Each spec read once: the HTML wants the designs and the draft lengths of them.
        specs = job_specs(engine, name) if runs is not None else {}
        designs, lengths = designs_of(specs), draft_lengths_of(specs)
        recommendation = _recommendation(engine, name) if fmt == "html" else None
    if fmt == "json" and group_by is None and not by_category:
        # Every row carries its campaign x model x GPU class's answer, as the table opens.
        emit(rows_to_json(with_headlines(rows)), output)
        return
    report = report_frame(rows)
    title = "all campaigns" if name is None else f"campaign {name}"
    if fmt == "html":
        groups = group_sheet(group_report(report, group_by), group_by) if group_by else None
        _write_html(title, report, runs, designs, output, recommendation, groups, lengths)
        return
    if by_category and runs is not None:
        frame = category_summary(category_report(runs, report, designs))
        sheet = category_sheet(frame, title)
    elif group_by is not None:
        frame = group_report(report, group_by)
        sheet = group_sheet(frame, group_by)
    else:
        frame, sheet = report, job_sheet(report, title)
        if fmt in ("table", "md"):
            width = None if fmt == "md" or wide or output is not None else terminal_width()
            text = _with_headlines(headlines(report), fmt, width,
                                   formatted(frame, [sheet], fmt, wide=wide, output=output))
            # One line per flag the table shows (what it means, what to do), wrapped as the
            # headlines are.
            legend = _wrapped(job_legend(report), width) if fmt == "table" else []
            emit("\n".join([text.rstrip("\n"), *legend]) + "\n" if legend else text, output)
            return
        if fmt == "csv":
            frame = report.assign(headline=[row["headline"] for row in with_headlines(rows)])
    emit(formatted(frame, [sheet], fmt, wide=wide, output=output), output)


def _wrapped(lines: list[str], width: int | None) -> list[str]:
    """Each line wrapped at spaces to the terminal's ``width`` (none: as they are)."""
    import textwrap

    return [textwrap.fill(line, width, subsequent_indent="  ", break_long_words=False)
            if width else line for line in lines]


def _with_headlines(lines: list[str], fmt: str, width: int | None, tables: str) -> str:
    """The report's answer (``farm.report.headline``) above its tables, each line wrapped
    to the terminal's ``width``."""
    if not lines:
        return tables
    bullet = "- " if fmt == "md" else ""
    return "\n".join(_wrapped([bullet + line for line in lines], width)) + "\n\n" + tables


def formatted(frame: pd.DataFrame, sheets: list[Sheet], fmt: str, *, wide: bool = False,
              output: Path | None = None) -> str:
    """``frame`` as CSV or JSON (every column), or its ``sheets`` as a table or markdown."""
    if fmt == "json":
        return to_json(frame)
    if fmt == "csv":
        return to_csv(frame)
    return sheets_text(sheets, fmt, wide=wide, output=output)


def to_csv(frame: pd.DataFrame) -> str:
    """CSV that any tool loads: lists and mappings in a cell as JSON, not Python's repr."""
    nested = [column for column in frame.columns if frame[column].dtype == object
              and frame[column].map(lambda value: isinstance(value, dict | list | tuple)).any()]
    return str(frame.assign(**{str(column): frame[column].map(
        lambda value: json.dumps(value) if isinstance(value, dict | list | tuple) else value)
        for column in nested}).to_csv(index=False))


def _recommendation(engine: Engine, campaign: str | None) -> Recommendation | None:
    """A campaign's ``farm recommend`` picks, candidates and the engine curve they used."""
    if campaign is None:
        return None
    from farm.report.html import Recommendation
    from farm.results.recommend import predictions, recommendations, store_curve_points

    points = store_curve_points(engine)
    candidates = predictions(engine, campaign, points)
    if candidates.empty:
        return None
    used = points.merge(candidates[["model", "gpu_class", "build", "spec_type"]]
                        .drop_duplicates(), on=["model", "gpu_class", "build", "spec_type"])
    return Recommendation(recommendations(candidates), candidates, _curve(used))


def _curve(points: pd.DataFrame) -> EngineCurve | None:
    from farm.report.html import EngineCurve
    from farm.results.curve import curve_fits, curve_table

    if points.empty:
        return None
    return EngineCurve(curve_table(points), points, curve_fits(points))


def _write_html(title: str, report: pd.DataFrame, runs: pd.DataFrame | None,
                designs: Mapping[str, Design | None], output: Path | None,
                recommendation: Recommendation | None, groups: Sheet | None = None,
                lengths: Mapping[str, int] | None = None) -> None:
    import pandas as pd

    # Here, not at the top: matplotlib takes most of a second to load, and only HTML plots.
    from farm.report.html import render_html
    from farm.results.curve import curve_points

    if output is None:
        raise ConfigError("--format html writes a file: give -o report.html")
    runs = runs if runs is not None else pd.DataFrame()
    jobs = with_design_columns(report, lengths)
    curve = _curve(curve_points(jobs)) if "kind" in jobs else None
    page = render_html(title, jobs, category_report(runs, report, designs), runs, curve=curve,
                       recommendation=recommendation, groups=groups)
    write_file(output, page.encode("utf-8"))


def show_comparison(settings: Settings, a: str, b: str, fmt: str, *,
                    build_a: str | None = None, build_b: str | None = None,
                    gates: tuple[str, ...] = (), output: Path | None = None,
                    wide: bool = False) -> None:
    """Campaigns (or builds) A and B side by side, in ``fmt``; ``gates``: exit 3 on a
    speedup regression beyond them (``farm.cli.show_history.gate_comparison``)."""
    from farm.cli.show_history import gate_comparison, thresholds
    from farm.results.compare import compare

    thresholds(gates, {"speedup"}, ("all",))  # a bad gate fails before the store is read
    if a == b and build_a == build_b:
        print(f"warning: both sides are campaign {a}" + (f" on build {build_a}" if build_a
                                                          else "")
              + ": every job is compared with itself, so no change can show; give two "
              "campaigns, or two builds of one (--build-a, --build-b)", file=sys.stderr)

    with open_store(settings) as engine:
        frame = compare(engine, a, b, build_a=build_a, build_b=build_b)
    emit(formatted(frame, [compare_sheet(frame, a, b)], fmt, wide=wide, output=output),
         output)
    gate_comparison(frame, gates)


def show_curve(settings: Settings, campaign: str | None, fmt: str, *,
               all_campaigns: bool = False, output: Path | None = None,
               plot: Path | None = None, wide: bool = False) -> None:
    """The engine cost curve of the synthetic-acceptance jobs of ``campaign`` (default the
    latest; every campaign with ``all_campaigns``) in ``fmt``; ``plot`` also gets the plot
    (PNG)."""
    from farm.results.curve import curve_fits, curve_points, curve_table

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        points = curve_points(job_report(engine, name))
    title = "all campaigns" if name is None else f"campaign {name}"
    if points.empty:
        raise ConfigError(f"{title} has no synthetic-acceptance job with a speedup yet: add "
                          "an `engine-curve:` to the matrix (docs/statistics.md, \"Engine cost "
                          "curve\") and run it, or give another campaign")
    curves = curve_table(points)
    if fmt == "json":
        emit(_json_object(curves=curves, points=points), output)
    else:
        emit(formatted(curves, curve_sheets(curves, points, title), fmt, wide=wide,
                       output=output), output)
    if plot is not None:
        from farm.report.plots import engine_curve

        engine_curve(points, curve_fits(points), plot)
        print(f"wrote {plot}", file=sys.stderr)


def _json_object(**frames: pd.DataFrame) -> str:
    """Frames as one JSON object of record lists (NaN as null)."""
    return json.dumps({name: json.loads(frame.to_json(orient="records", date_format="iso"))
                       for name, frame in frames.items()}, indent=1)


def show_recommendation(settings: Settings, campaign: str | None, fmt: str, *,
                        output: Path | None = None, matrix: Path | None = None,
                        verify: str | None = None, model: str | None = None,
                        gpu_class: str | None = None, wide: bool = False) -> None:
    """``farm recommend``: the best setting per GPU class x model x category with the
    runner-up and why; ``matrix`` gets the matrix that checks them; ``verify`` names the
    campaign that ran it, to put predictions and measurements side by side."""
    from farm.results import recommend

    with open_store(settings) as engine:
        name = campaign or latest_campaign(engine)
        candidates = recommend.predictions(engine, name)
        for column, wanted in (("model", model), ("gpu_class", gpu_class)):
            if wanted is not None:
                candidates = candidates[candidates[column] == wanted]
        if candidates.empty:
            raise ConfigError(
                f"campaign {name}: nothing to recommend from. It needs variant jobs that "
                "drafted (per-position acceptance counters) and an engine cost curve of "
                "the same build, model, GPU class and spec type in the store (an "
                "`engine-curve:` campaign: docs/statistics.md, \"farm recommend\")")
        if verify is not None:
            checked = recommend.check(engine, candidates, verify)
            emit(formatted(checked, [check_sheet(checked, f"{name} -> {verify}")], fmt,
                           wide=wide, output=output), output)
            return
        chosen = recommend.recommendations(candidates)
        if matrix is not None:
            _write_verify_matrix(engine, name, candidates, matrix)
    if fmt == "json":
        emit(_json_object(recommendations=chosen, candidates=candidates), output)
    else:
        emit(formatted(chosen, recommendation_sheets(chosen, candidates, f"campaign {name}"),
                       fmt, wide=wide, output=output), output)


def _write_verify_matrix(engine: Engine, campaign: str, candidates: pd.DataFrame,
                         output: Path) -> None:
    """The recommended and runner-up settings of every row vs baseline, as a matrix file
    (written whole or not at all)."""
    import yaml

    from farm.results.recommend import verify_matrix

    top = candidates[candidates["rank"] <= 2]
    engines = top[["model", "build"]].drop_duplicates()
    if len(engines) != 1:
        raise ConfigError(f"--write-matrix writes one matrix, for one model and build; "
                          f"campaign {campaign} has {len(engines)}: narrow it with --model "
                          "(and --gpu-class)")
    matrix = verify_matrix(engine, campaign, top)
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    partial.replace(output)
    print(f"wrote {output}: {len(matrix['variants'])} settings vs baseline on "
          f"{len(matrix['prompts'])} prompts (campaign {matrix['campaign']})", file=sys.stderr)


def export_runs(settings: Settings, campaign: str | None, fmt: str, output: Path | None, *,
                all_campaigns: bool = False) -> None:
    """The tidy runs of a campaign (default the latest; every one with ``all_campaigns``)
    as CSV, JSON or Parquet, in ``output`` (stdout for CSV and JSON without it)."""
    with open_store(settings) as engine:
        runs = runs_frame(engine, None if all_campaigns
                          else campaign or latest_campaign(engine))
    from farm.results.export import runs_parquet, typed_runs

    runs = typed_runs(runs)
    if fmt == "parquet":
        if output is None:
            raise ConfigError("--format parquet writes a file: give -o runs.parquet")
        write_file(output, runs_parquet(runs), f"{len(runs)} runs")
    else:
        emit(to_csv(runs) if fmt == "csv" else to_json(runs), output, f"{len(runs)} runs")
