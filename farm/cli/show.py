"""What ``farm report``, ``farm compare``, ``farm curve``, ``farm recommend`` and ``farm
export`` print or write: frames loaded from the store (``farm.results``), rendered in the
format asked for (``farm.report``).

``farm report --format json`` prints the per-job rows without pandas, numpy, rich or yaml
(most of its time in a cold process was loading them): they load where they are used.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import ConfigError
from farm.report import kinds
from farm.report.formats import FORMATS, Target, check_target, render, write
from farm.report.output import emit
from farm.results.groups import category_report, category_summary, group_report, with_design_columns
from farm.results.printed import keep_printed, printed_report
from farm.results.rows import report_rows
from farm.results.runs import designs_of, draft_lengths_of, job_specs, runs_frame
from farm.settings import Settings
from farm.store.campaigns import latest_campaign
from farm.store.db import open_store

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd
    from sqlalchemy import Engine

    from farm.matrix.spec import JobSpec
    from farm.report.html import EngineCurve, Recommendation
    from farm.report.sheet import Sheet


def show_report(settings: Settings, campaign: str | None, fmt: str, *,
                all_campaigns: bool = False, group_by: str | None = None,
                by_category: bool = False, output: Path | None = None,
                wide: bool = False) -> None:
    """The jobs of ``campaign`` (default the latest) per job, per group or per category."""
    check_target(kinds.JobReport, fmt, output)
    draws = FORMATS[fmt].draws
    # Kept rows print as they are only where the rows are printed one by one.
    kept = FORMATS[fmt].kept and group_by is None and not by_category
    target = Target(wide, output)
    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        printed = printed_report(engine, name) if kept else None
        if printed is not None and printed.body is not None:
            emit(printed.body, output)
            return
        found = report_rows(engine, name, kept=kept)
        rows = found.rows
        runs = runs_frame(engine, name) if by_category or draws else None
        # Each spec read once: the page wants the designs and the draft lengths of them.
        specs = job_specs(engine, name) if runs is not None else {}
        recommendation = _recommendation(engine, name) if draws else None
        title = "all campaigns" if name is None else f"campaign {name}"
        if printed is not None:
            text = render(kinds.JobReport(title, rows, None, found.kept), fmt, target)
            assert isinstance(text, str), "a kept report is printed as text"
            emit(text, output)
            keep_printed(engine, printed, text.encode())
            return
    from farm.columns import report_frame

    if group_by is None and not by_category:
        page = _page(report_frame(rows), runs, specs, recommendation) if draws else None
        write(kinds.JobReport(title, rows, page, found.kept), fmt, target)
        return
    from farm.report.text import category_sheet, group_sheet

    report = report_frame(rows)
    if group_by is not None:
        frame = group_report(report, group_by)
        sheet = group_sheet(frame, group_by)
    else:
        assert runs is not None
        frame = category_summary(category_report(runs, report, designs_of(specs)))
        sheet = category_sheet(frame, title)
    page = _page(report, runs, specs, recommendation, sheet if group_by else None) \
        if draws else None
    write(kinds.ReportTables(frame, [sheet], title, page), fmt, target)


def _page(report: pd.DataFrame, runs: pd.DataFrame | None,
          specs: Mapping[str, JobSpec | None],
          recommendation: Recommendation | None,
          groups: Sheet | None = None) -> kinds.CampaignPage:
    """What the campaign's page draws besides its jobs (``report``, typed): design columns,
    categories, the runs, the engine curve of its synthetic jobs, ``farm recommend``'s
    picks."""
    import pandas as pd

    from farm.results.curve import curve_points

    runs = runs if runs is not None else pd.DataFrame()
    jobs = with_design_columns(report, draft_lengths_of(specs))
    curve = _curve(curve_points(jobs)) if "kind" in jobs else None
    return kinds.CampaignPage(jobs, category_report(runs, report, designs_of(specs)), runs,
                              curve, recommendation, groups)


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


def show_comparison(settings: Settings, a: str, b: str, fmt: str, *,
                    build_a: str | None = None, build_b: str | None = None,
                    gates: tuple[str, ...] = (), output: Path | None = None,
                    wide: bool = False) -> None:
    """Campaigns (or builds) A and B side by side, in ``fmt``; ``gates``: exit 3 on a
    speedup regression beyond them (``farm.cli.show_history.gate_comparison``)."""
    from farm.cli.show_history import gate_comparison, thresholds
    from farm.report.text import compare_sheet
    from farm.results.compare import compare

    thresholds(gates, {"speedup"}, ("all",))  # a bad gate fails before the store is read
    if a == b and build_a == build_b:
        print(f"warning: both sides are campaign {a}" + (f" on build {build_a}" if build_a
                                                          else "")
              + ": every job is compared with itself, so no change can show; give two "
              "campaigns, or two builds of one (--build-a, --build-b)", file=sys.stderr)

    with open_store(settings) as engine:
        frame = compare(engine, a, b, build_a=build_a, build_b=build_b)
    write(kinds.Tables(frame, [compare_sheet(frame, a, b)]), fmt, Target(wide, output))
    gate_comparison(frame, gates)


def show_curve(settings: Settings, campaign: str | None, fmt: str, *,
               all_campaigns: bool = False, output: Path | None = None,
               plot: Path | None = None, wide: bool = False) -> None:
    """The engine cost curve of the synthetic-acceptance jobs of ``campaign`` (default the
    latest; every campaign with ``all_campaigns``) in ``fmt``; ``plot`` also gets the plot
    (PNG)."""

    from farm.results.curve import curve_fits, curve_points, curve_table
    from farm.results.rows import job_report

    with open_store(settings) as engine:
        name = None if all_campaigns else (campaign or latest_campaign(engine))
        points = curve_points(job_report(engine, name))
    title = "all campaigns" if name is None else f"campaign {name}"
    if points.empty:
        raise ConfigError(f"{title} has no synthetic-acceptance job with a speedup yet: add "
                          "an `engine-curve:` to the matrix (docs/statistics.md, \"Engine cost "
                          "curve\") and run it, or give another campaign")
    write(kinds.Curves(curve_table(points), points, title), fmt, Target(wide, output))
    if plot is not None:
        from farm.report.plots import engine_curve

        engine_curve(points, curve_fits(points), plot)
        print(f"wrote {plot}", file=sys.stderr)


def show_recommendation(settings: Settings, campaign: str | None, fmt: str, *,
                        output: Path | None = None, matrix: Path | None = None,
                        verify: str | None = None, model: str | None = None,
                        gpu_class: str | None = None, wide: bool = False) -> None:
    """``farm recommend``: the best setting per GPU class x model x category with the
    runner-up and why; ``matrix`` gets the matrix that checks them; ``verify`` names the
    campaign that ran it, to put predictions and measurements side by side."""

    from farm.report.text import check_sheet
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
            write(kinds.Tables(checked, [check_sheet(checked, f"{name} -> {verify}")]), fmt,
                  Target(wide, output))
            return
        chosen = recommend.recommendations(candidates)
        if matrix is not None:
            _write_verify_matrix(engine, name, candidates, matrix)
    write(kinds.Recommendations(chosen, candidates, f"campaign {name}"), fmt,
          Target(wide, output))


def _write_verify_matrix(engine: Engine, campaign: str, candidates: pd.DataFrame,
                         output: Path) -> None:
    """The recommended and runner-up settings of every row vs baseline, as a matrix file
    (written whole or not at all)."""
    from farm.matrix.yaml_file import matrix_yaml
    from farm.results.recommend import verify_matrix

    top = candidates[candidates["rank"] <= 2]
    if top.empty:
        raise ConfigError(f"--write-matrix: campaign {campaign} has nothing to check: no "
                          "setting was predicted (insufficient data: acceptance's error "
                          "needs two or more prompts per category). Run the campaign with "
                          "more prompts, then `farm recommend --write-matrix` again")
    engines = top[["model", "build"]].drop_duplicates()
    if len(engines) != 1:
        raise ConfigError(f"--write-matrix writes one matrix, for one model and build; "
                          f"campaign {campaign} has {len(engines)}: narrow it with --model "
                          "(and --gpu-class)")
    matrix = verify_matrix(engine, campaign, top)
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text(matrix_yaml(matrix), encoding="utf-8")
    partial.replace(output)
    print(f"wrote {output}: {len(matrix['variants'])} settings vs baseline on "
          f"{len(matrix['prompts'])} prompts (campaign {matrix['campaign']})", file=sys.stderr)


def export_runs(settings: Settings, campaign: str | None, fmt: str, output: Path | None, *,
                all_campaigns: bool = False) -> None:
    """The tidy runs of a campaign (default the latest; every one with ``all_campaigns``)
    as CSV, JSON or Parquet, in ``output`` (stdout for CSV and JSON without it)."""
    from farm.results.export import typed_runs

    check_target(kinds.Runs, fmt, output)
    with open_store(settings) as engine:
        runs = runs_frame(engine, None if all_campaigns
                          else campaign or latest_campaign(engine))
    write(kinds.Runs(typed_runs(runs)), fmt, Target(output=output))
