"""Peers' results: ``farm import`` reads other tools' output files into the store (kept
apart from the farm's runs), ``farm peers`` shows them beside the farm's matching jobs."""

from __future__ import annotations

from pathlib import Path

import click

from farm.cli.base import cli
from farm.cli.output import output_options
from farm.peers.read import FORMATS
from farm.report import kinds
from farm.settings import load_settings


@cli.command("import")
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS),
              help="What wrote the files (default: told from their content).")
@click.option("--build-commit", help="The llama.cpp commit, where a file records none.")
@click.option("--build-number", type=int, help="The llama.cpp build number, where none.")
@click.option("--model-file", help="The GGUF's file name, where a file records none.")
@click.option("--threads", "n_threads", type=int, help="Threads (-t), where none.")
@click.option("--gpu-layers", "n_gpu_layers", type=int, help="GPU layers (-ngl), where none.")
@click.option("--spec-type", help="The speculative type the peer ran, where none.")
@click.option("--note", help="Kept with the import (where and how it was measured).")
def import_(files: tuple[Path, ...], fmt: str | None, build_commit: str | None,
            build_number: int | None, model_file: str | None, n_threads: int | None,
            n_gpu_layers: int | None, spec_type: str | None, note: str | None) -> None:
    """Read FILES (llama-bench -o json|jsonl|csv|sql, speed-bench --output JSON,
    llama-spec-bench JSONL) into the store as imported figures: all of them or none."""
    from farm.cli.show_peers import import_files

    given = {"build_commit": build_commit, "build_number": build_number,
             "model_file": model_file, "n_threads": n_threads, "n_gpu_layers": n_gpu_layers,
             "spec_type": spec_type}
    import_files(load_settings(), files, fmt, given, note)


@cli.command()
@click.argument("campaign", required=False)
@output_options(kinds.Peers, all_help="The jobs of every campaign.")
def peers(campaign: str | None, fmt: str, output: Path | None, wide: bool,
          all_campaigns: bool) -> None:
    """Imported figures beside the farm's jobs of CAMPAIGN (default: the latest) that ran
    the same model file, build and threads/offload; then those no job matches."""
    from farm.cli.show_peers import show_peers

    show_peers(load_settings(), campaign, fmt, all_campaigns=all_campaigns, output=output,
               wide=wide)
