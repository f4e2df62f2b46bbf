"""What ``farm report``, ``farm compare``, ``farm curve``, ``farm recommend`` and ``farm
export`` print or write: frames loaded from the store (``farm.workflows.reports``), rendered
in the format asked for (``farm.report``).

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
from farm.results.runs import designs_of, draft_lengths_of
from farm.settings import Settings
from farm.workflows import reports

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd

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
    loaded = reports.campaign_report(settings, campaign, all_campaigns, kept=kept,
                                     runs=by_category, draws=draws)
    printed, found, runs, specs = loaded.printed, loaded.rows, loaded.runs, loaded.specs
    if printed is not None and printed.body is not None:
        emit(printed.body, output)
        return
    assert found is not None and specs is not None, "rows are loaded unless printed"
    rows = found.rows
    recommendation = _recommendation(loaded.recommending)
    title = "all campaigns" if loaded.campaign is None else f"campaign {loaded.campaign}"
    if printed is not None:
        text = render(kinds.JobReport(title, rows, None, found.kept), fmt, target)
        assert isinstance(text, str), "a kept report is printed as text"
        emit(text, output)
        reports.keep_report(settings, printed, text.encode())
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


def _recommendation(picks: reports.Recommending | None) -> Recommendation | None:
    """A campaign's ``farm recommend`` picks, candidates and the engine curve they used."""
    if picks is None:
        return None
    from farm.report.html import Recommendation

    return Recommendation(picks.chosen, picks.candidates, _curve(picks.points))


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

    thresholds(gates, {"speedup"}, ("all",))  # a bad gate fails before the store is read
    if a == b and build_a == build_b:
        print(f"warning: both sides are campaign {a}" + (f" on build {build_a}" if build_a
                                                          else "")
              + ": every job is compared with itself, so no change can show; give two "
              "campaigns, or two builds of one (--build-a, --build-b)", file=sys.stderr)

    frame = reports.comparison(settings, a, b, build_a=build_a, build_b=build_b)
    write(kinds.Tables(frame, [compare_sheet(frame, a, b)]), fmt, Target(wide, output))
    gate_comparison(frame, gates)


def show_curve(settings: Settings, campaign: str | None, fmt: str, *,
               all_campaigns: bool = False, output: Path | None = None,
               plot: Path | None = None, wide: bool = False) -> None:
    """The engine cost curve of the synthetic-acceptance jobs of ``campaign`` (default the
    latest; every campaign with ``all_campaigns``) in ``fmt``; ``plot`` also gets the plot
    (PNG)."""
    from farm.results.curve import curve_fits, curve_table

    found = reports.curve_points_of(settings, campaign, all_campaigns)
    points = found.frame
    title = "all campaigns" if found.campaign is None else f"campaign {found.campaign}"
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

    found = reports.recommendation(settings, campaign, model=model, gpu_class=gpu_class,
                                   verify=verify, matrix=matrix)
    name = found.campaign
    if found.checked is not None:
        write(kinds.Tables(found.checked, [check_sheet(found.checked, f"{name} -> {verify}")]),
              fmt, Target(wide, output))
        return
    if found.matrix is not None:
        print(f"wrote {matrix}: {len(found.matrix['variants'])} settings vs baseline on "
              f"{len(found.matrix['prompts'])} prompts (campaign {found.matrix['campaign']})",
              file=sys.stderr)
    assert found.chosen is not None, "picks unless verifying"
    write(kinds.Recommendations(found.chosen, found.candidates, f"campaign {name}"), fmt,
          Target(wide, output))


def export_runs(settings: Settings, campaign: str | None, fmt: str, output: Path | None, *,
                all_campaigns: bool = False) -> None:
    """The tidy runs of a campaign (default the latest; every one with ``all_campaigns``)
    as CSV, JSON or Parquet, in ``output`` (stdout for CSV and JSON without it)."""
    from farm.results.export import typed_runs

    check_target(kinds.Runs, fmt, output)
    runs = reports.campaign_runs(settings, campaign, all_campaigns)
    write(kinds.Runs(typed_runs(runs)), fmt, Target(output=output))
