"""Results: ``farm report``, ``farm compare``, ``farm history``, ``farm curve``,
``farm recommend``, ``farm export``."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import click
from click.decorators import FC

from farm.cli.base import cli
from farm.cli.output import output_options
from farm.report import kinds
from farm.settings import load_settings

_GATE_HELP = ("Exit 3 when a series regressed (by the difference test, false discovery rate "
              "5%) beyond PERCENT (default 0); repeatable; SERIES alone, or no value: "
              "{default}. Put it after the arguments, or write --fail-on-regression=VALUE.")


def _gate_option(default: str, known: str) -> Callable[[FC], FC]:
    return click.option("--fail-on-regression", "gates", multiple=True, is_flag=False,
                        flag_value=default, metavar="[SERIES[:PERCENT]]",
                        help=_GATE_HELP.format(default=known))


@cli.command()
@click.argument("campaign", required=False)
@output_options(kinds.JobReport,
                all_help="Every campaign in the store (a campaign column when rows come from "
                "several).")
@click.option("--group-by", type=click.Choice(["gpu_class", "worker", "model", "variant"]),
              help="Aggregate jobs: geometric-mean speedup per group.")
@click.option("--by-category", is_flag=True, help="Speedup per prompt category.")
def report(campaign: str | None, fmt: str, output: Path | None, all_campaigns: bool,
           group_by: str | None, by_category: bool, wide: bool) -> None:
    """Show one row per job of CAMPAIGN (default: the latest)."""
    from farm.cli.show import show_report

    show_report(load_settings(), campaign, fmt, all_campaigns=all_campaigns,
                group_by=group_by, by_category=by_category, output=output, wide=wide)


@cli.command()
@click.argument("a")
@click.argument("b")
@click.option("--build-a", help="Only A's jobs on this build (two builds of one campaign).")
@click.option("--build-b", help="Only B's jobs on this build.")
@output_options(kinds.Tables)
@_gate_option("speedup", "speedup:0 (any speedup regression)")
def compare(a: str, b: str, build_a: str | None, build_b: str | None, fmt: str,
            output: Path | None, wide: bool, gates: tuple[str, ...]) -> None:
    """Campaigns A and B (or two builds) side by side: change per matching job, and
    whether it is outside the noise."""
    from farm.cli.show import show_comparison

    show_comparison(load_settings(), a, b, fmt, build_a=build_a, build_b=build_b,
                    gates=gates, output=output, wide=wide)


@cli.command()
@click.argument("target")
@output_options(kinds.History, wide_help=(
    "Every column of the table, however wide, and every acceptance position (without it, "
    "positions past @4 are folded and a narrow terminal hides the least needed columns)."))
@_gate_option("all", "all:0 (any series of the newest build)")
def history(target: str, fmt: str, output: Path | None, wide: bool,
            gates: tuple[str, ...]) -> None:
    """Every build the jobs of TARGET (a matrix file, or a comparable key or its first 8+
    hex digits) ran on, in commit order: each series with its interval, and the changes
    between consecutive builds (docs/history.md).

    Each row is the latest job of its key on that build, from any campaign: the campaign
    column names it. Acceptance @1..@N is the share of drafts accepted at each draft
    position (past @4 folded unless --wide); acceptance length the mean accepted length
    per draft, (accepted + drafts) / drafts; neither is the report's accept (accepted over
    drafted tokens)."""
    from farm.cli.show_history import show_history

    show_history(load_settings(), target, fmt, output, gates, wide=wide)


@cli.command()
@click.argument("campaign", required=False)
@output_options(kinds.Curves,
                all_help="The synthetic-acceptance jobs of every campaign.")
@click.option("--plot", type=click.Path(path_type=Path, dir_okay=False),
              help="Also write the plot: speedup vs acceptance length, a line per draft "
                   "length, break-even marked (PNG).")
def curve(campaign: str | None, all_campaigns: bool, fmt: str, output: Path | None,
          wide: bool, plot: Path | None) -> None:
    """The engine cost curve of CAMPAIGN (default: the latest): from its synthetic-acceptance
    jobs, the speedup per acceptance length, the step cost and the break-even length per
    draft length, with 95% intervals."""
    from farm.cli.show import show_curve

    show_curve(load_settings(), campaign, fmt, all_campaigns=all_campaigns, output=output,
               plot=plot, wide=wide)


@cli.command()
@click.argument("campaign", required=False)
@output_options(kinds.Recommendations)
@click.option("--write-matrix", "matrix", type=click.Path(path_type=Path, dir_okay=False),
              help="Write the matrix that checks the recommendation: recommended and "
                   "runner-up settings vs baseline on the same prompts (YAML).")
@click.option("--check", "verify", metavar="VERIFY_CAMPAIGN",
              help="Put the predictions beside what VERIFY_CAMPAIGN (a run of that matrix) "
                   "measured, with a verdict per row.")
@click.option("--model", help="Only this model.")
@click.option("--gpu-class", help="Only this GPU class.")
def recommend(campaign: str | None, fmt: str, output: Path | None, wide: bool,
              matrix: Path | None, verify: str | None, model: str | None,
              gpu_class: str | None) -> None:
    """The settings to use per GPU class, model and prompt category, predicted from the
    drafters' measured acceptance in CAMPAIGN (default: the latest) and the engine cost
    curves in the store, with the runner-up and why."""
    from farm.cli.show import show_recommendation

    show_recommendation(load_settings(), campaign, fmt, output=output, matrix=matrix,
                        verify=verify, model=model, gpu_class=gpu_class, wide=wide)


@cli.command()
@click.argument("campaign", required=False)
@output_options(kinds.Runs, default="csv",
                all_help="The runs of every campaign (a campaign column names each).")
def export(campaign: str | None, fmt: str, output: Path | None, all_campaigns: bool) -> None:
    """The tidy runs of CAMPAIGN (default: the latest), one row per run."""
    from farm.cli.show import export_runs

    export_runs(load_settings(), campaign, fmt, output, all_campaigns=all_campaigns)
