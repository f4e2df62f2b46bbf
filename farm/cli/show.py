"""What ``farm report``, ``farm compare``, ``farm curve``, ``farm recommend`` and ``farm
export`` print or write: frames loaded from the store (``farm.results``), rendered in the
format asked for (``farm.report``).

``farm report --format json`` prints the per-job rows without pandas, numpy, rich or yaml
(most of its time in a cold process was loading them): they load where they are used.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, cast

from farm.errors import ConfigError
from farm.report.legend import job_legend
from farm.report.text import (
    ReportFormat,
    category_table,
    check_table,
    compare_table,
    curve_tables,
    group_table,
    print_wide,
    recommendation_tables,
    render,
    rows_to_json,
    to_json,
    wide_console,
)
from farm.results.groups import category_report, category_summary, group_report, with_design_columns
from farm.results.rows import job_report, job_rows, report_frame
from farm.results.runs import job_designs, runs_frame
from farm.settings import Settings
from farm.store.campaigns import latest_campaign
from farm.store.db import open_store

if TYPE_CHECKING:
    from collections.abc import Mapping

    import pandas as pd
    from rich.table import Table
    from sqlalchemy import Engine

    from farm.report.html import EngineCurve, Recommendation
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
        designs = job_designs(engine, name) if runs is not None else {}
        recommendation = _recommendation(engine, name) if fmt == "html" else None
    if fmt == "json" and group_by is None and not by_category:
        print(rows_to_json(rows))
        return
    report = report_frame(rows)
    console = wide_console()
    title = "all campaigns" if name is None else f"campaign {name}"
    if fmt == "html":
        _write_html(title, report, runs, designs, output, recommendation)
        return
    if by_category and runs is not None:
        summary = category_summary(category_report(runs, report, designs))
        if fmt == "table":
            console.print(category_table(summary, title))
        else:
            render(summary, title, cast(ReportFormat, fmt), console)
        return
    if group_by is None:
        render(report, title, cast(ReportFormat, fmt), console, wide=wide)
        if fmt == "table":
            for line in job_legend(report):
                console.print(line, markup=False, highlight=False)
        return
    groups = group_report(report, group_by)
    if fmt == "table":
        console.print(group_table(groups, group_by))
    else:
        render(groups, title, cast(ReportFormat, fmt), console)


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
                recommendation: Recommendation | None) -> None:
    import pandas as pd

    # Here, not at the top: matplotlib takes most of a second to load, and only HTML plots.
    from farm.report.html import render_html
    from farm.results.curve import curve_points

    if output is None:
        raise ConfigError("--format html writes a file: give -o report.html")
    runs = runs if runs is not None else pd.DataFrame()
    jobs = with_design_columns(report)
    curve = _curve(curve_points(jobs)) if "kind" in jobs else None
    page = render_html(title, jobs, category_report(runs, report, designs), runs, curve=curve,
                       recommendation=recommendation)
    output.write_text(page, encoding="utf-8")
    print(f"wrote {output} ({len(page) // 1024} KiB)")


def show_comparison(settings: Settings, a: str, b: str, fmt: str, *,
                    build_a: str | None = None, build_b: str | None = None,
                    gates: tuple[str, ...] = ()) -> None:
    """Campaigns (or builds) A and B side by side, as a table, CSV or JSON; ``gates``:
    exit 3 on a speedup regression beyond them (``farm.cli.show_history.gate_comparison``)."""
    from rich.console import Console

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
    if fmt == "table":
        print_wide(Console(), compare_table(frame, a, b))
    elif fmt == "json":
        print(to_json(frame))
    else:
        print(frame.to_csv(index=False), end="")
    gate_comparison(frame, gates)


def show_curve(settings: Settings, campaign: str | None, fmt: str, *,
               all_campaigns: bool = False, output: Path | None = None) -> None:
    """The engine cost curve of the synthetic-acceptance jobs of ``campaign`` (default the
    latest; every campaign with ``all_campaigns``), as tables, CSV or JSON; ``output``
    also gets the plot (PNG)."""
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
        print(json.dumps({"curves": json.loads(curves.to_json(orient="records")),
                          "points": json.loads(points.to_json(orient="records"))}, indent=1))
    elif fmt == "csv":
        print(curves.to_csv(index=False), end="")
    else:
        console = wide_console()
        for table in curve_tables(curves, points, title):
            print_wide(console, table)
    if output is not None:
        from farm.report.plots import engine_curve

        engine_curve(points, curve_fits(points), output)
        print(f"wrote {output}", file=sys.stderr if fmt != "table" else sys.stdout)


def show_recommendation(settings: Settings, campaign: str | None, fmt: str, *,
                        output: Path | None = None, verify: str | None = None,
                        model: str | None = None, gpu_class: str | None = None) -> None:
    """``farm recommend``: the best setting per GPU class x model x category with the
    runner-up and why; ``output`` gets the matrix that checks them; ``verify`` names the
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
            _print_frame(checked, fmt, lambda: [check_table(checked, f"{name} -> {verify}")])
            return
        chosen = recommend.recommendations(candidates)
        if output is not None:
            _write_verify_matrix(engine, name, candidates, output)
    if fmt == "json":
        print(json.dumps({"recommendations": json.loads(chosen.to_json(orient="records")),
                          "candidates": json.loads(candidates.to_json(orient="records"))},
                         indent=1))
    else:
        console = wide_console()
        for table in recommendation_tables(chosen, candidates, f"campaign {name}"):
            print_wide(console, table)


def _print_frame(frame: pd.DataFrame, fmt: str, tables: Callable[[], list[Table]]) -> None:
    if fmt == "json":
        print(to_json(frame))
        return
    console = wide_console()
    for table in tables():
        print_wide(console, table)


def _write_verify_matrix(engine: Engine, campaign: str, candidates: pd.DataFrame,
                         output: Path) -> None:
    """The recommended and runner-up settings of every row vs baseline, as a matrix file
    (written whole or not at all)."""
    import yaml

    from farm.results.recommend import verify_matrix

    top = candidates[candidates["rank"] <= 2]
    engines = top[["model", "build"]].drop_duplicates()
    if len(engines) != 1:
        raise ConfigError(f"-o writes one matrix, for one model and build; campaign "
                          f"{campaign} has {len(engines)}: narrow it with --model (and "
                          "--gpu-class)")
    matrix = verify_matrix(engine, campaign, top)
    partial = output.with_name(f".{output.name}.partial")
    partial.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    partial.replace(output)
    print(f"wrote {output}: {len(matrix['variants'])} settings vs baseline on "
          f"{len(matrix['prompts'])} prompts (campaign {matrix['campaign']})", file=sys.stderr)


def export_runs(settings: Settings, campaign: str | None, fmt: str, output: Path) -> int:
    """Write the tidy runs of a campaign (default the latest) as CSV or Parquet."""
    with open_store(settings) as engine:
        runs = runs_frame(engine, campaign or latest_campaign(engine))
    if "node_top" in runs:
        # Stored as [name, pid, cores] triples; a record each, so Parquet types the column.
        runs["node_top"] = runs["node_top"].map(
            lambda top: None if not isinstance(top, list) else [
                {"process": name, "pid": pid, "cores": cores} for name, pid, cores in top])
    if fmt == "parquet":
        runs.to_parquet(output, index=False)
    else:
        lists = [column for column in ("argv", "tokens", "spec_accepted_per_pos",
                                       "throttle_reasons", "node_top") if column in runs]
        runs.assign(**{c: runs[c].map(json.dumps) for c in lists}).to_csv(output, index=False)
    return len(runs)
