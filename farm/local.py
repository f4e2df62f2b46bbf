"""``farm run``: execute a matrix in-process on the embedded store, with progress."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from sqlalchemy import Engine

from farm.errors import ConfigError, FarmError, JobsFailed
from farm.matrix.load import load_matrix
from farm.matrix.schema import Matrix
from farm.matrix.spec import ArmRole, JobSpec
from farm.report import wide_console
from farm.settings import Settings
from farm.store import repo
from farm.store.db import make_engine, upgrade
from workers.checks import preflight
from workers.executor import RunResult, execute_job
from workers.failures import classify
from workers.runtime.server import HOST
from workers.telemetry import all_gpus


def arm_command(spec: JobSpec, role: ArmRole) -> list[str]:
    """The exact argv of an arm, with the port the farm picks shown as ``PORT``."""
    model = spec.model.path or f"MODELS_DIR/{spec.model.file}"
    farm_flags = ["--model", model, "--host", HOST, "--port", "PORT", "--parallel", "1",
                  "--metrics"]
    arm = spec.arm(role)
    return [arm.build.path or f"<build {arm.build.name}>", *farm_flags, *arm.argv]


def print_dry_run(specs: list[JobSpec], console: Console) -> None:
    """The expanded jobs as a table, then the exact argv of each arm (copy-pasteable)."""
    table = Table(title=f"{len(specs)} jobs", title_justify="left")
    for header in ("job key", "class", "model", "variant", "varying flags"):
        table.add_column(header, overflow="fold")
    for spec in specs:
        table.add_row(spec.job_key[:12], spec.gpu_class, spec.model.name, spec.variant.name,
                      spec.varying_text)
    console.print(table)
    for spec in specs:
        console.print(f"\njob {spec.job_key[:12]} ({spec.model.name}, {spec.variant.name})",
                      markup=False)
        for role in ("baseline", "variant"):
            console.print(f"  {role:9}{shlex.join(arm_command(spec, role))}", markup=False,
                          soft_wrap=True)


def _variant_key(matrix: Matrix, spec: JobSpec) -> str:
    for index, variant in enumerate(matrix.variants):
        if spec.variant.name == variant.name or spec.variant.name.startswith(variant.name + "["):
            return f"variants[{index}] ({spec.variant.name})"
    return f"variant {spec.variant.name}"


def check_all(path: Path, matrix: Matrix, specs: list[JobSpec]) -> None:
    """Check every job against its build and model before anything is written.

    Errors name the matrix file and the place in it: the baseline's flags, a variant, or
    a model.
    """
    for spec in specs:
        try:
            preflight(spec)
        except ConfigError as exc:
            where = {"baseline": "flags (baseline)", "variant": _variant_key(matrix, spec)}.get(
                exc.role or "", f"models ({spec.model.name})")
            raise type(exc)(f"{path}: {where}: {exc}") from exc


class _Progress:
    def __init__(self, console: Console, total_runs: int) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(), console=console)
        self.task = self.bar.add_task("starting", total=total_runs)
        self.label = ""

    def job(self, index: int, count: int, spec: JobSpec) -> None:
        self.label = f"job {index}/{count} {spec.model.name} {spec.variant.name}"
        self.bar.update(self.task, description=self.label)

    def run(self, result: RunResult) -> None:
        tok_s = result.generation.decode_tok_s
        task = self.bar.tasks[0]
        if task.total is not None and task.completed + 1 > task.total:
            # The adaptive rule added a pair beyond the planned minimum.
            self.bar.update(self.task, total=task.total + 1)
        self.bar.update(self.task, advance=1, description=(
            f"{self.label} · {result.key.arm} block {result.slot.block} · {tok_s:.1f} tok/s"))


def _execute(engine: Engine, specs: list[JobSpec], job_ids: list[int], settings: Settings,
             console: Console) -> int:
    pending = [(spec, job_id) for spec, job_id in zip(specs, job_ids, strict=True)
               if repo.job_state(engine, job_id) != "done"]
    if len(pending) < len(specs):
        console.print(f"{len(specs) - len(pending)} of {len(specs)} jobs already done: skipped")
    # Planned at the minimum of pairs; the adaptive rule may add some.
    runs_each = [2 * s.pairs * len(s.prompts) * s.repetitions for s, _ in pending]
    failed = 0
    gpus = all_gpus()
    progress = _Progress(console, sum(runs_each))
    with progress.bar:
        for index, (spec, job_id) in enumerate(pending, start=1):
            progress.job(index, len(pending), spec)
            sink = repo.DbRunSink(engine, job_id)
            progress.bar.advance(progress.task, len(sink.done()))
            repo.mark_running(engine, job_id)
            try:
                outcome = execute_job(spec, sink, logs_dir=settings.logs_dir,
                                      on_run=progress.run, gpus=gpus)
            except KeyboardInterrupt:
                repo.mark_finished(engine, job_id, "queued", "interrupted; `farm run` resumes")
                raise
            except FarmError as exc:
                repo.mark_finished(engine, job_id, "failed", str(exc), classify(exc))
                console.print(f"[red]job {spec.job_key[:10]} failed:[/red] {exc}", markup=False)
                failed += 1
                continue
            repo.mark_finished(engine, job_id, "done",
                               summary=repo.job_summary(engine, job_id, outcome))
    return failed


def _one_class(path: Path, matrix: Matrix, gpu_class: str | None) -> str:
    if gpu_class is None and len(matrix.gpu_classes) == 1:
        return matrix.gpu_classes[0]
    if gpu_class in matrix.gpu_classes:
        return gpu_class
    raise ConfigError(f"{path}: gpu-classes: `farm run` runs on this one machine; pick one "
                      f"of {', '.join(matrix.gpu_classes)} with --gpu-class")


def run_local(path: Path, settings: Settings, console: Console, *, dry_run: bool,
              gpu_class: str | None = None) -> str | None:
    """Validate, check, store and execute; returns the campaign, or None for a dry run.

    Raises ``FarmError`` subclasses; a failed job is reported and counted, not raised.
    """
    matrix, specs = load_matrix(path)
    chosen = _one_class(path, matrix, gpu_class)
    specs = [spec for spec in specs if spec.gpu_class == chosen]
    if dry_run:
        print_dry_run(specs, wide_console())
        return None
    check_all(path, matrix, specs)
    engine = make_engine(settings.database_url)
    try:
        upgrade(engine)
        job_ids = repo.register(engine, matrix.campaign, str(path.resolve()), specs)
        failed = _execute(engine, specs, job_ids, settings, console)
    finally:
        engine.dispose()
    if failed:
        raise JobsFailed(f"{failed} of {len(specs)} jobs failed; see `farm report "
                         f"{matrix.campaign}` and the server logs in {settings.logs_dir}",
                         matrix.campaign)
    return matrix.campaign

