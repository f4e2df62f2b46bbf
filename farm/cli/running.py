"""``farm run``: a matrix on this machine, in-process, on the embedded store."""

from __future__ import annotations

import signal
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click
from rich.console import Console

from farm.cli.base import as_class_option, cli
from farm.errors import JobsFailed
from farm.settings import Settings, load_settings
from farm.words import plural

if TYPE_CHECKING:
    from farm.runner import CheckedMatrix


def sigterm_as_interrupt(_signum: int, _frame: FrameType | None) -> None:
    """SIGTERM stops a run as Ctrl-C does: servers stopped, finished runs kept."""
    raise KeyboardInterrupt


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--dry-run", is_flag=True,
              help="Make every check a run makes and print the argv that would run; run "
                   "nothing, write nothing.")
@click.option("--gpu-class", help="With several gpu-classes in MATRIX: the one to run here.")
@as_class_option
@click.option("--allow-option", "allow_options", multiple=True, metavar="NAME",
              help="Let the matrix pass this harmless llama-server option beyond the farm's "
                   "allow-list (repeatable); options that run programs, reach the network or "
                   "touch files are never allowed.")
@click.option("--allow-build-path", is_flag=True,
              help="Run the llama-server binaries the matrix names by `build: {path: ...}` "
                   "(they run code: only for matrices you trust).")
@click.option("--allow-path", "allow_paths", multiple=True, metavar="DIR",
              type=click.Path(exists=True, file_okay=False, path_type=Path),
              help="Let the matrix's flags (draft model, LoRA, control vector, projector) "
                   "name files under DIR as well as the models dir (repeatable; only for "
                   "matrices you trust).")
def run(matrix: Path, dry_run: bool, gpu_class: str | None, as_class: str | None,
        allow_options: tuple[str, ...], allow_build_path: bool,
        allow_paths: tuple[Path, ...]) -> None:
    """Run MATRIX on this machine against real llama-server processes."""
    from farm.cli.dry_run import print_dry_run
    from farm.matrix.options import check_allowances
    from farm.runner import check_matrix, this_machine
    from farm.workflows.reports import measured_costs
    from farm.workflows.tune import is_tune

    settings = load_settings()
    if is_tune(matrix):  # a race, not every job (farm tune)
        from farm.cli.tune import run_tune

        run_tune(matrix, settings, (gpu_class, as_class), "table", None, dry_run)
        return
    console = Console(stderr=True)
    signal.signal(signal.SIGTERM, sigterm_as_interrupt)
    say_sandbox(settings, console)
    allowed = check_allowances(allow_options, "--allow-option")
    picked, run_as = this_machine(settings, gpu_class, as_class)
    checked = check_matrix(matrix, settings, gpu_class=picked, run_as=run_as,
                           allow_options=allowed,
                           allow_build_path=allow_build_path, allow_paths=allow_paths,
                           make_builds=not dry_run,
                           say=lambda line: console.print(line, markup=False, soft_wrap=True))
    if dry_run:
        console = Console()
        print_dry_run([(check.spec, check) for _, check in checked.checked]
                      + [(spec, None) for spec, _ in checked.unbuilt], console,
                      measured_costs(settings))
        for line in checked.notes:
            console.print(line, markup=False, soft_wrap=True)
        return
    run_checked(checked, settings, console)


def say_sandbox(settings: Settings, console: Console) -> None:
    """One line when a commit's code would not run in the sandbox here (it is off, or
    bubblewrap cannot run): what a user of this machine should know before a build."""
    from farm.workflows.node import sandbox_note

    if (note := sandbox_note(settings)) is not None:
        console.print(note, markup=False, soft_wrap=True)


def run_checked(checked: CheckedMatrix, settings: Settings, console: Console) -> str:
    """Run a checked matrix here with a progress bar on ``console`` (after a line of how long
    it may take), then print its report (failed jobs too); returns the campaign. SIGTERM
    should be ``sigterm_as_interrupt``."""
    from farm.cli.progress import RunProgress
    from farm.cli.show import show_report
    from farm.runner import run_matrix
    from farm.workflows.reports import measured_costs

    try:
        campaign = run_matrix(checked, settings,
                              RunProgress(console, measured_costs(settings)))
    except JobsFailed as exc:
        show_report(settings, exc.campaign, "table")
        raise
    show_report(settings, campaign, "table")
    return campaign


@cli.command()
@click.argument("matrix", type=click.Path(path_type=Path))
@click.option("--gpu-class", help="With several gpu-classes in MATRIX: the one this node "
                                  "serves.")
def prepare(matrix: Path, gpu_class: str | None) -> None:
    """Download MATRIX's Hub and URL models and make its source builds on this node, ahead
    of its jobs (a worker about to join, a box that will be offline), with progress; then
    check every job as `farm run` would. Runs nothing."""
    from farm.runner import check_matrix

    console = Console(stderr=True)
    checked = check_matrix(matrix, load_settings(), gpu_class=gpu_class,
                           say=lambda line: console.print(line, markup=False, soft_wrap=True))
    models = sorted({spec.model.name for spec in checked.specs})
    click.echo(f"{matrix}: ready on this node: {plural(len(checked.specs), 'job')}, models "
               f"{', '.join(models)}, their builds made and every job checked")


@cli.command()
@click.option("--gpu-class", help="The class this node serves (a label in the output).")
@click.option("--devices", help="GPU indices, e.g. 0 or 0,1: the checks run on these, with "
                                "every layer offloaded (-ngl 99).")
@click.option("--build", "build_name", default="cpu", show_default=True,
              help="The llama-server build to check (a `farm build` name).")
def selftest(gpu_class: str | None, devices: str | None, build_name: str) -> None:
    """Check this node and the farm against known answers: the MTP oracle accepts every
    draft with identical text, the anti-oracle none, synthetic rates read back, MTP beats
    the baseline on the oracle, an A/A control covers 1, GPUs report telemetry. Exits 1 on
    any failure."""
    from farm.cli.fleet import parse_devices
    from farm.selftest import report_failures, testbed_for
    from farm.selftest import selftest as run_checks

    console = Console()
    node = testbed_for({"name": build_name}, parse_devices(devices))
    if gpu_class:
        console.print(f"selftest of GPU class {gpu_class}", markup=False)
    report_failures(run_checks(load_settings(), node, console))
