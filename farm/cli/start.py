"""The first hour: ``farm ab`` (one A/B in one command), ``farm init`` (a starter matrix),
``farm schema`` (the matrix's JSON Schema) and ``farm paths`` (where everything is)."""

from __future__ import annotations

import json
import math
import shlex
import signal
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from farm.cli.base import cli
from farm.cli.running import run_checked, sigterm_as_interrupt
from farm.errors import ConfigError
from farm.matrix.files import under
from farm.settings import Settings, load_settings, redact_url

if TYPE_CHECKING:
    from farm.stats.design import Design

# `farm ab`'s default design runs up to this many pairs; --pairs takes at most MAX_AB_PAIRS.
DEFAULT_MAX_PAIRS = 12
MAX_AB_PAIRS = 100


def _baseline(ngl: int | None, ctx: int | None, threads: int | None, flash_attn: str | None,
              args: str | None) -> dict[str, Any]:
    from farm.matrix.starter import flag_map

    given = {"n-gpu-layers": ngl, "ctx-size": ctx, "threads": threads, "flash-attn": flash_attn}
    flags = {name: value for name, value in given.items() if value is not None}
    return flags | flag_map(args or "", "--args")


def _answer(row: dict[str, Any], design: Design) -> str:
    """The A/B's answer in one line: the speedup, its interval and what it says, read
    against the ``design`` the job ran (its target half-width, its pairs)."""
    speedup, low, high = (row.get(key) for key in ("speedup", "ci_low", "ci_high"))
    if row.get("speculation") == "none":
        return ("answer: the variant drafted nothing on these prompts, so it cannot decode "
                "faster here; try prompts it can draft on (--prompt-suite), or other flags")
    if speedup is None:
        return "answer: none; the job has no speedup (see its flags above)"
    if low is None or high is None:
        return (f"answer: the variant decoded {speedup:.2f}x as fast as the baseline; too few "
                "block pairs for an interval (give --pairs 2 or more)")
    verdict = ("faster" if low > 1 else "slower" if high < 1 else
               _around_one(speedup, low, high, int(row.get("pairs") or 0), design))
    return (f"answer: the variant decodes {speedup:.2f}x as fast as the baseline "
            f"[{low:.2f}, {high:.2f}] (95% interval, {row.get('pairs')} block pairs): "
            f"{verdict}")


def _around_one(speedup: float, low: float, high: float, pairs: int, design: Design) -> str:
    """What an interval that holds 1x says: no meaningful difference when it lies within
    the design's target; else no difference shown, with more pairs advised only when the
    design stopped short of its target (a half-width wider than it: the row's stop reason
    then reads "target not reachable" for an assured design, "... reached" for others)."""
    target = f"±{design.target * 100:g}%"
    if 1 - design.target <= low and high <= 1 + design.target:
        return f"no meaningful difference: within {target}"
    half = (high - low) / 2 / speedup
    if half <= design.target:
        return (f"within noise: no difference shown; the interval (±{half:.1%}) met the "
                f"design's {target} target, yet leaves a difference of up to "
                f"{max(1 - low, high - 1):.1%} possible")
    short = (f"within noise: no difference shown; the interval (±{half:.1%} after "
             f"{pairs} pairs) is short of the design's {target} target")
    if not design.two_stage and pairs < DEFAULT_MAX_PAIRS:
        return (f"{short}: more pairs narrow it (the default design, without --pairs, runs "
                f"4 to {DEFAULT_MAX_PAIRS})")
    # The half-width shrinks about as 1 / sqrt(pairs); the t quantile falling with them
    # makes this a little more than enough.
    more = min(max(math.ceil(pairs * (half / design.target) ** 2), pairs + 1), MAX_AB_PAIRS)
    advice = (f"more pairs narrow it (--pairs {MAX_AB_PAIRS} at most)" if more == MAX_AB_PAIRS
              else f"about {more} pairs would reach it (--pairs {more})")
    return f"{short}: {advice}; a quieter machine narrows it too"


class _AbCommand(click.Command):
    """``farm ab``, whose unknown options are most often the variant's flags put before
    ``--``: the error says where they go."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        """Parse as click does; an unknown option gets the hint."""
        try:
            return super().parse_args(ctx, args)
        except click.NoSuchOption as exc:
            raise click.UsageError(f"{exc.format_message()} The variant's flags go after "
                                   f"`--`: farm ab MODEL -- {exc.option_name} ...", ctx) from exc


@cli.command(cls=_AbCommand)
@click.argument("model")
@click.argument("variant", nargs=-1, type=click.UNPROCESSED, metavar="-- VARIANT_FLAGS...")
@click.option("-ngl", "--n-gpu-layers", "ngl", type=int,
              help="Baseline: layers on the GPU (-ngl); the variant adds its flags to the "
                   "baseline's.")
@click.option("-c", "--ctx-size", "ctx", type=int, help="Baseline: context size (-c).")
@click.option("-t", "--threads", type=int, help="Baseline: CPU threads (-t).")
@click.option("-fa", "--flash-attn", type=click.Choice(["on", "off", "auto"]),
              help="Baseline: flash attention (-fa).")
@click.option("--args", metavar="FLAGS",
              help="More baseline flags as one string, e.g. '-ctk q8_0 -ctv q8_0'.")
@click.option("--pairs", type=click.IntRange(1, MAX_AB_PAIRS), metavar="N",
              help=f"A fixed number of block pairs (default: 4, then up to {DEFAULT_MAX_PAIRS} "
                   "until the speedup is known to ±3%).")
@click.option("--n-predict", type=click.IntRange(2, 32768), default=128, show_default=True,
              help="Tokens generated per run.")
@click.option("--repetitions", type=click.IntRange(1, 1000), metavar="N",
              help="Runs per prompt per block (default 3).")
@click.option("--prompt-suite", "suite", multiple=True, default=["tutorial"],
              show_default=True, metavar="CATEGORY",
              help="Built-in prompts of this category (repeatable; `all` for every one).")
@click.option("--prompt-mode", type=click.Choice(["chat", "completion"]), default="chat",
              show_default=True,
              help="chat: the model's chat template; completion: the prompts as raw text.")
@click.option("--build", default="cpu", show_default=True,
              help="The llama-server build (`farm builds` lists them).")
@click.option("-o", "--output", type=click.Path(path_type=Path),
              help="Where to write the matrix it runs (default: in the data dir, beside the "
                   "results; `farm paths` shows it).")
def ab(model: str, variant: tuple[str, ...], ngl: int | None, ctx: int | None,
       threads: int | None, flash_attn: str | None, args: str | None, pairs: int | None,
       n_predict: int, repetitions: int | None, suite: tuple[str, ...], prompt_mode: str,
       build: str, output: Path | None) -> None:
    """Is MODEL faster with VARIANT_FLAGS? Baseline vs baseline + VARIANT_FLAGS (given after
    `--`), run here with the farm's design; prints the answer and writes the matrix it ran
    (re-run it with `farm run`, send it to a fleet with `farm submit`). MODEL is a GGUF
    file, or its name in the models dir."""
    from farm.matrix.load import matrix_yaml
    from farm.matrix.starter import ab_matrix, flag_map, model_entry
    from farm.results.rows import job_rows
    from farm.runner import check_matrix
    from farm.store.db import open_store

    settings = load_settings()
    design: dict[str, Any] = {
        "prompt-mode": prompt_mode, "prompt-suite": "all" if "all" in suite else list(suite),
        "n-predict": n_predict}
    if repetitions is not None:
        design["repetitions"] = repetitions
    if pairs is not None:
        design |= {"pairs": pairs, "max-pairs": pairs}
    matrix = ab_matrix(model_entry(model, settings.models_dir),
                       _baseline(ngl, ctx, threads, flash_attn, args),
                       flag_map(shlex.join(variant), "the variant's flags (after --)"),
                       design=design, build=build, gpu_class=settings.gpu_class)
    path = output or under(settings.data_dir, "ab", f"{matrix['campaign']}.yaml", what="matrix")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Written by `farm ab`; `farm run {path}` runs it again.\n"
                    + matrix_yaml(matrix), encoding="utf-8")
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    checked = check_matrix(path, settings,
                           say=lambda line: console.print(line, markup=False, soft_wrap=True))
    campaign = run_checked(checked, settings, console)
    with open_store(settings) as engine:
        rows = job_rows(engine, campaign)
    key = checked.specs[0].job_key
    click.echo(_answer(next(row for row in rows if row["job_key"] == key),
                       checked.specs[0].design))
    click.echo(f"matrix: {path} (`farm run` it again: nothing new to run; `farm submit` it "
               "to a fleet)")


@cli.command()
@click.argument("output", type=click.Path(path_type=Path), default="matrix.yaml")
@click.option("--engine-curve", is_flag=True,
              help="A matrix with an `engine-curve:` block and a drafter: `farm curve` and "
                   "`farm recommend` read its campaign.")
@click.option("--force", is_flag=True, help="Overwrite OUTPUT if it exists.")
def init(output: Path, engine_curve: bool, force: bool) -> None:
    """Write a commented starter matrix to OUTPUT (default matrix.yaml), ready for `farm run`
    after `farm provision` (or the Quickstart)."""
    from farm.matrix.starter import ENGINE_CURVE_STARTER, STARTER

    if output.exists() and not force:
        raise ConfigError(f"{output} exists: give another file name, or --force to "
                          "overwrite it")
    output.write_text(ENGINE_CURVE_STARTER if engine_curve else STARTER, encoding="utf-8")
    click.echo(f"wrote {output}; check it with `farm run --dry-run {output}`, run it with "
               f"`farm run {output}`")


@cli.command()
def schema() -> None:
    """Print the matrix's JSON Schema, for an editor to complete and check matrix files
    (docs/matrix.md, "Editors")."""
    from farm.matrix.schema import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


def _database(settings: Settings) -> str:
    url = settings.database_url
    return url.removeprefix("sqlite:///") if settings.embedded else redact_url(url)


@cli.command()
def paths() -> None:
    """Where the farm keeps things on this machine: the database, the logs, the caches,
    the builds and the models (each set by a FARM_* variable: `farm -h`)."""
    from workers.paths import NodePaths

    settings = load_settings()
    node = NodePaths.of(settings)
    for name, place, why in (
            ("database", _database(settings), "results (FARM_DATABASE_URL)"),
            ("data", settings.data_dir, "database, logs, `farm ab`'s matrices (FARM_DATA_DIR)"),
            ("logs", settings.logs_dir, "llama-server logs, one per block"),
            ("cache", settings.cache_dir, "sources, ccache, model hashes (FARM_CACHE_DIR)"),
            ("builds", node.builds_dir, "llama.cpp builds, one folder per name"),
            ("models", settings.models_dir, "GGUF files (FARM_MODELS_DIR)"),
            ("downloads", settings.downloads_dir, "Hub and URL models (FARM_DOWNLOADS_DIR)")):
        click.echo(f"{name:<10} {place}  # {why}")
