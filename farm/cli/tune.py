"""``farm tune``: the fastest of many speculative settings for a model on this machine,
found by a race with simultaneous intervals (the workflow: ``farm.workflows.tune``; the
statistics: ``farm.stats.race``; docs/tune.md). ``farm run`` hands a matrix with a
`tune:` section here too."""

from __future__ import annotations

import re
import signal
from pathlib import Path
from typing import Any

import click
from rich.console import Console

from farm.cli.base import as_class_option, cli
from farm.cli.output import output_options
from farm.errors import ConfigError
from farm.matrix.schema import Tune
from farm.report import kinds
from farm.settings import Settings, load_settings


def _budget(text: str | None) -> dict[str, Any]:
    """``--budget``: pairs (``200``) or minutes (``30m``)."""
    if text is None:
        return {}
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(m|min|minutes)?\s*", text)
    if found is None or float(found[1]) <= 0:
        raise ConfigError(f"farm tune: --budget {text!r}: give pairs (e.g. 200) or minutes "
                          "(e.g. 30m), more than zero")
    if found[2]:
        return {"budget-minutes": float(found[1])}
    if not found[1].isdigit():
        raise ConfigError(f"farm tune: --budget {text!r}: pairs are a whole number")
    return {"budget-pairs": int(found[1])}


def _drafter(drafter: str, settings: Settings) -> str:
    """``--drafter`` as a draft model flag names it: its file in the models dir."""
    from farm.matrix.starter import model_entry

    entry = model_entry(drafter, settings.models_dir)
    if "file" not in entry:
        raise ConfigError(f"farm tune: --drafter {drafter}: a draft model lies in the models "
                          f"dir {settings.models_dir} (FARM_MODELS_DIR); copy it there")
    return entry["file"]


def _say(console: Console) -> Any:
    return lambda line: console.print(line, markup=False, soft_wrap=True)


def run_tune(path: Path, settings: Settings, classes: tuple[str | None, str | None],
             fmt: str, output: Path | None, dry_run: bool = False, *,
             fleet: bool = False) -> None:
    """Race the tune matrix at ``path`` and write its answer (``farm tune``, and ``farm
    run`` of a matrix with `tune:`); ``dry_run``: its space only. Each round's jobs run here,
    or with ``fleet`` (``farm submit`` of a tune matrix) on the fleet's workers of its GPU
    class while this process decides the race."""
    from farm.cli.progress import RunProgress
    from farm.report.formats import Target, write
    from farm.workflows.tune import answer, space, tune
    from farm.workflows.tune_jobs import check_first_round, check_race, run_here, submit_round

    console = Console(stderr=True)
    say = _say(console)
    # Checked before the race opens its store (a bad matrix leaves nothing behind): here as
    # a run checks it (`farm run --dry-run` of a tune matrix too); for the fleet the race,
    # each round's jobs then admitted as `farm submit` admits them.
    if fleet:
        check_race(path)
    else:
        check_first_round(path, settings, classes, say if dry_run else lambda _line: None,
                          make_builds=False)
    if dry_run:
        write(kinds.TuneSpace(space(path)), fmt, Target(output=output))
        return
    run_round = submit_round(settings, say) if fleet else run_here(
        settings, classes, say, lambda: RunProgress(console))
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stops as Ctrl-C does
    write(kinds.TuneAnswer(answer(tune(path, settings, run_round, say))), fmt,
          Target(output=output))


@cli.command(name="tune")
@click.argument("model")
@click.option("--drafter", metavar="GGUF",
              help="A draft model (-md): the default space is then draft-simple's.")
@click.option("--spec-type", metavar="TYPE",
              help="The speculation to tune (default: draft-simple with --drafter, else "
                   "ngram-simple); draft-mtp for a model with MTP heads.")
@click.option("--space", "space_items", multiple=True, metavar="FLAG=V1,V2",
              help="A flag and the values to race (repeatable; every combination is a "
                   "candidate); default: the spec type's space, over the options the "
                   "build's --help lists.")
@click.option("--epsilon", type=float, default=Tune.model_fields["epsilon"].default,
              show_default=True,
              help="Settings within this of the fastest are a fair choice (0.02 = 2%).")
@click.option("--budget", metavar="PAIRS|MINUTESm",
              help="Most block pairs (200) or minutes (30m) the race spends.")
@click.option("-t", "--threads", type=int, help="Baseline: CPU threads (-t).")
@click.option("-ngl", "--n-gpu-layers", "ngl", type=int, help="Baseline: layers on the GPU.")
@click.option("--args", metavar="FLAGS", help="More baseline flags as one string.")
@click.option("--n-predict", type=click.IntRange(2, 32768), default=128, show_default=True,
              help="Tokens generated per run.")
@click.option("--repetitions", type=click.IntRange(1, 1000), default=3, show_default=True,
              help="Runs per prompt per block.")
@click.option("--prompt-suite", "suite", multiple=True, default=["tutorial"],
              show_default=True, metavar="CATEGORY", help="Built-in prompts of this category.")
@click.option("--prompt-mode", type=click.Choice(["chat", "completion"]), default="chat",
              show_default=True, help="chat: the model's chat template; completion: raw.")
@click.option("--build", default="cpu", show_default=True, help="The llama-server build.")
@click.option("--write-matrix", type=click.Path(path_type=Path),
              help="Where to write the tune's matrix (default: the data dir); `farm run` "
                   "runs it again (resuming), a confirmatory run edits its `tune:` away.")
@click.option("--dry-run", is_flag=True,
              help="Check the space against the build and model; print it and its size; run "
                   "nothing.")
@output_options(kinds.TuneAnswer, wide=False)
@as_class_option
def tune_command(model: str, drafter: str | None, spec_type: str | None,
                 space_items: tuple[str, ...], epsilon: float, budget: str | None,
                 threads: int | None, ngl: int | None, args: str | None, n_predict: int,
                 repetitions: int, suite: tuple[str, ...], prompt_mode: str, build: str,
                 write_matrix: Path | None, dry_run: bool, fmt: str, output: Path | None,
                 as_class: str | None) -> None:
    """Which speculative setting makes MODEL fastest here? Every candidate of a space runs
    a few block pairs against the baseline; those shown slower than the leader by more than
    --epsilon drop out, the rest run on until one is named within --epsilon of the fastest
    (or the budget ends). Each round is a stored campaign: the same command resumes."""
    from farm.matrix.starter import flag_map, model_entry
    from farm.workflows.tune_start import (
        build_options,
        default_space,
        matrix_place,
        parse_space,
        tune_body,
    )

    if not epsilon > 0:
        raise ConfigError(f"farm tune: --epsilon {epsilon}: give a margin above 0, e.g. 0.02")
    settings = load_settings()
    race = {"epsilon": epsilon, **_budget(budget)}
    kind = spec_type or ("draft-simple" if drafter else "ngram-simple")
    chosen = parse_space(space_items) if space_items else default_space(
        kind, build_options(settings, build))
    baseline = {name: value for name, value in (("threads", threads), ("n-gpu-layers", ngl))
                if value is not None} | flag_map(args or "", "farm tune --args")
    candidate = {"spec-type": kind, **({"spec-draft-model": _drafter(drafter, settings)}
                                       if drafter else {})}
    body = tune_body(model_entry(model, settings.models_dir), baseline,
                     {**candidate, **chosen}, race,
                     {"prompt-mode": prompt_mode, "prompt-suite": list(suite),
                      "n-predict": n_predict,
                      "repetitions": repetitions}, build, settings.gpu_class)
    path = matrix_place(settings, body["campaign"], write_matrix)
    _checked_then_written(body, path, settings, (None, as_class), dry_run)
    run_tune(path, settings, (None, as_class), fmt, output, dry_run)


def _checked_then_written(body: dict[str, Any], path: Path, settings: Settings,
                          classes: tuple[str | None, str | None], dry_run: bool) -> None:
    """The tune's matrix written beside ``path``, its first round checked here as `farm
    run` checks a matrix (nothing started), then moved to ``path``: a check that fails
    leaves no file."""
    from farm.matrix.yaml_file import matrix_yaml
    from farm.workflows.tune_jobs import check_first_round

    path.parent.mkdir(parents=True, exist_ok=True)
    trial = path.with_name(f".{path.name}.checking")
    trial.write_text(f"# Written by `farm tune`; `farm run {path}` runs it again.\n"
                     + matrix_yaml(body), encoding="utf-8")
    try:
        check_first_round(trial, settings, classes, _say(Console(stderr=True)),
                          make_builds=not dry_run)
        trial.replace(path)
    except ConfigError as exc:
        exc.args = (str(exc).replace(str(trial), "farm tune's command line"),)
        raise
    finally:
        trial.unlink(missing_ok=True)
