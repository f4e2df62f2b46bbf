"""The first hour: ``farm ab`` (one A/B in one command), ``farm init`` (a starter matrix),
``farm schema`` (the matrix's JSON Schema, or the report's) and ``farm paths`` (where
everything is, and the models)."""

from __future__ import annotations

import json
import math
import re
import shlex
import signal
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console

from farm.cli.base import cli
from farm.cli.running import run_checked, sigterm_as_interrupt
from farm.errors import ConfigError, FarmError
from farm.matrix.files import under
from farm.settings import Settings, load_settings, redact_url

if TYPE_CHECKING:
    from farm.runner import CheckedMatrix
    from farm.stats.design import Answer, Design
    from farm.workflows.node import ModelsHere

# `farm ab`'s default design runs up to this many pairs; --pairs takes at most MAX_AB_PAIRS.
DEFAULT_MAX_PAIRS = 12
MAX_AB_PAIRS = 100


def _baseline(ngl: int | None, ctx: int | None, threads: int | None, flash_attn: str | None,
              args: str | None) -> dict[str, Any]:
    from farm.matrix.options import canonical
    from farm.matrix.starter import flag_map

    given = {"n-gpu-layers": ngl, "ctx-size": ctx, "threads": threads, "flash-attn": flash_attn}
    flags = {name: value for name, value in given.items() if value is not None}
    more = flag_map(args or "", "farm ab --args")
    twice = sorted(set(flags) & {canonical(raw, raw) for raw in more})
    if twice:
        raise ConfigError(f"farm ab: --{twice[0]} is given as an option and in --args; give "
                          "it once")
    return flags | more


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
    from farm.stats.design import answer

    found = answer(low, high, design.target)
    if design.sequential and row.get("stop_reason"):
        saved = 1 - int(row.get("pairs") or 0) / design.max_pairs
        # A decision design's stop reason is its answer; a precision design's says when it
        # met its target, after what its interval answers.
        said = row["stop_reason"]
        if design.rule != "decision":
            what = f"within ±{design.target * 100:g}%" if found == "within" else found
            said = f"{what} ({said})"
        return (f"answer: the variant decodes {speedup:.2f}x as fast as the baseline "
                f"[{low:.2f}, {high:.2f}] (95% interval): {said}; about "
                f"{saved:.0%} of a fixed {design.max_pairs}-pair design's GPU time saved")
    verdict = found if found in ("faster", "slower") else \
        _around_one(found, speedup, low, high, int(row.get("pairs") or 0), design)
    return (f"answer: the variant decodes {speedup:.2f}x as fast as the baseline "
            f"[{low:.2f}, {high:.2f}] (95% interval, {row.get('pairs')} block pairs): "
            f"{verdict}")


def _around_one(found: Answer, speedup: float, low: float, high: float, pairs: int,
                design: Design) -> str:
    """What an interval that holds 1x says: no meaningful difference when it lies within
    the design's target; else no difference shown, with more pairs advised only when the
    design stopped short of its target (a half-width wider than it: the row's stop reason
    then reads "target not reachable" for an assured design, "... reached" for others)."""
    target = f"±{design.target * 100:g}%"
    if found == "within":
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
              help="A fixed number of block pairs (default: the --stop-rule's).")
@click.option("--stop-rule", type=click.Choice(["decision", "precision", "two-stage"]),
              help=f"decision (the default): from 4 pairs, a look after each, stop once "
                   f"faster, slower or within ±3% is decided (at most {DEFAULT_MAX_PAIRS}); "
                   f"precision: from 4 pairs, a look after each, stop once the speedup's "
                   f"interval is within ±3% (at most {DEFAULT_MAX_PAIRS}); two-stage: 4 "
                   "pairs plan how many more measure it to ±3% (the design before).")
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
       stop_rule: str | None, n_predict: int, repetitions: int | None, suite: tuple[str, ...],
       prompt_mode: str, build: str, output: Path | None) -> None:
    """Is MODEL faster with VARIANT_FLAGS? Baseline vs baseline + VARIANT_FLAGS (given after
    `--`), run here with the farm's design; prints the answer and writes the matrix it ran
    (re-run it with `farm run`, send it to a fleet with `farm submit`). MODEL is a GGUF
    file, or its name in the models dir (`.gguf` optional)."""
    from farm.matrix.starter import ab_matrix, flag_map, model_entry
    from farm.workflows.reports import job_rows_of

    settings = load_settings()
    design: dict[str, Any] = {
        "prompt-mode": prompt_mode, "prompt-suite": "all" if "all" in suite else list(suite),
        "n-predict": n_predict}
    if repetitions is not None:
        design["repetitions"] = repetitions
    if pairs is not None and stop_rule is not None:
        raise ConfigError(f"farm ab: --pairs {pairs} runs a fixed number of pairs and "
                          f"--stop-rule {stop_rule} decides how many: give one of them")
    if pairs is not None:
        design |= {"pairs": pairs, "max-pairs": pairs}
    else:
        design["stop-rule"] = stop_rule or "decision"
    matrix = ab_matrix(model_entry(model, settings.models_dir),
                       _baseline(ngl, ctx, threads, flash_attn, args),
                       flag_map(shlex.join(variant), "farm ab"),
                       design=design, build=build, gpu_class=settings.gpu_class)
    path = output or under(settings.data_dir, "ab", f"{matrix['campaign']}.yaml", what="matrix")
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    checked = _checked_then_written(matrix, path, settings, lambda line: console.print(
        line, markup=False, soft_wrap=True))
    campaign = run_checked(checked, settings, console)
    rows = job_rows_of(settings, campaign)
    key = checked.specs[0].job_key
    click.echo(_answer(next(row for row in rows if row["job_key"] == key),
                       checked.specs[0].design))
    click.echo(f"matrix: {path} (`farm run` it again: nothing new to run; `farm submit` it "
               "to a fleet)")


# Where `check_matrix`'s errors point in the matrix `farm ab` makes, and the words of the
# command line that gave each place (none for the model and the build: their errors name
# them).
_PLACES = ((re.compile(r"variants\[0\](?:\.flags\.[^:]+| \([^)]*\))?: "),
            "the variant's flags (after `--`): "),
           (re.compile(r"(?:flags|args)(?:\.[^:]+| \(baseline\))?: "), "the baseline's flags: "),
           (re.compile(r"models\[0\]\.(?:path|file): "), ""),
           (re.compile(r"build: "), ""))


def _checked_then_written(matrix: dict[str, Any], path: Path, settings: Settings,
                          say: Callable[[str], None]) -> CheckedMatrix:
    """``matrix`` checked as `farm run` checks it (its builds, model and flags on this
    machine), then written to ``path`` for the run to name. A check that fails leaves no
    file, and its error names the command line's words: the matrix is no file of the
    user's until its run begins."""
    from farm.matrix.yaml_file import matrix_yaml
    from farm.runner import check_matrix

    path.parent.mkdir(parents=True, exist_ok=True)
    trial = path.with_name(f".{path.name}.checking")
    trial.write_text(f"# Written by `farm ab`; `farm run {path}` runs it again.\n"
                     + matrix_yaml(matrix), encoding="utf-8")
    try:
        checked = check_matrix(trial, settings, say=say)
        trial.replace(path)
    except FarmError as exc:
        exc.args = (_command_line_words(str(exc), trial),)
        raise
    finally:
        trial.unlink(missing_ok=True)
    return replace(checked, path=path)


def _command_line_words(message: str, trial: Path) -> str:
    """A check's ``message`` about the matrix ``trial`` as said of `farm ab`'s command
    line: the place in the matrix as the words that gave it."""
    if not message.startswith(f"{trial}: "):
        return message.replace(str(trial), "farm ab's command line")
    said = message.removeprefix(f"{trial}: ")
    for place, words in _PLACES:
        if place.match(said):
            said = place.sub(words, said, count=1)
            break
    return f"farm ab: {said}".replace(str(trial), "farm ab's command line")


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
@click.option("--report", is_flag=True,
              help="The JSON Schema of `farm report --format json` instead: its version and "
                   "every column's type and meaning.")
def schema(report: bool) -> None:
    """Print the matrix's JSON Schema, for an editor to complete and check matrix files
    (docs/matrix.md, "Editors")."""
    if report:
        from farm.report.text import report_json_schema

        click.echo(json.dumps(report_json_schema(), indent=2))
        return
    from farm.matrix.schema import json_schema

    click.echo(json.dumps(json_schema(), indent=2))


def _database(settings: Settings) -> str:
    url = settings.database_url
    return url.removeprefix("sqlite:///") if settings.embedded else redact_url(url)


@cli.command()
def paths() -> None:
    """Where the farm keeps things on this machine: the database, the logs, the caches,
    the builds and the models (each set by a FARM_* variable: `farm -h`); then each model
    file it finds, with its size."""
    from farm.workflows.node import models_here

    settings = load_settings()
    node = models_here(settings)
    for name, place, why in (
            ("database", _database(settings), "results (FARM_DATABASE_URL)"),
            ("data", settings.data_dir, "database, logs, `farm ab`'s matrices (FARM_DATA_DIR)"),
            ("logs", settings.logs_dir, "llama-server logs, one per block"),
            ("cache", settings.cache_dir, "sources, ccache, model hashes (FARM_CACHE_DIR)"),
            ("builds", node.builds_dir, "llama.cpp builds, one folder per name"),
            ("models", settings.models_dir, "GGUF files (FARM_MODELS_DIR)"),
            ("downloads", settings.downloads_dir, "Hub and URL models (FARM_DOWNLOADS_DIR)")):
        click.echo(f"{name:<10} {place}  # {why}")
    click.echo("\n".join(["", *_models_seen(node)]))


def _models_seen(node: ModelsHere) -> list[str]:
    """The model files on this machine, a line each with its size; or where to get one."""
    own, fetched = node.own, node.fetched
    if not own and not fetched:
        return [f"models: none in {node.models_dir} yet; `farm provision` fetches the "
                "tutorial's there, `farm ab PATH` takes any GGUF file, and a matrix's model "
                "may be a Hub repository's file (`hf:` and `file:`, docs/models.md) that "
                "`farm run` downloads"]
    lines = []
    for title, found in ((f"models in {node.models_dir} (a matrix's `file:`, `farm ab "
                          "NAME`):", own),
                         (f"downloaded into {node.downloads_dir} (a matrix's `hf:` or "
                          "`url:`):", fetched)):
        width = max((len(model.name) for model in found), default=0)
        lines += [title, *(f"  {model.name:<{width}}  {_size(model.size):>8}"
                           for model in found)] if found else []
    return lines


def _size(count: int) -> str:
    """``96.6 MB``, ``4.21 GB``: a file's size as the dry run gives a download's."""
    return f"{count / 1e9:.2f} GB" if count >= 1e9 else f"{count / 1e6:.1f} MB"
