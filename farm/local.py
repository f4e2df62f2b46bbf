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
from farm.report.text import wide_console
from farm.settings import Settings
from farm.store import repo
from farm.store.db import connected, upgrade
from farm.store.models import JobState
from workers.checks import Preflight, check_arms, preflight
from workers.executor import RunResult, execute_job, job_design
from workers.node import NodeFiles, NotOnThisNode, local_files, resolve, resolve_builds
from workers.paths import NodePaths
from workers.runtime.server import HOST
from workers.sinks import DbRunSink, job_summary
from workers.telemetry import GpuInfo, all_gpus


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


def _where(path: Path, matrix: Matrix, spec: JobSpec, exc: ConfigError) -> str:
    """The place in the matrix a job check failed on: a model, the build, the baseline's
    flags or a variant."""
    if exc.role == "build":
        return f"{path}: build"
    if exc.role == "baseline":
        return f"{path}: flags (baseline)"
    if exc.role == "variant":
        for index, variant in enumerate(matrix.variants):
            name = spec.variant.name
            if name == variant.name or name.startswith(variant.name + "["):
                return f"{path}: variants[{index}] ({name})"
        if matrix.engine_curve is not None:
            return f"{path}: engine-curve ({spec.variant.name})"
        return f"{path}: variant {spec.variant.name}"
    index = next(i for i, model in enumerate(matrix.models) if model.name == spec.model.name)
    return f"{path}: models[{index}].{'path' if spec.model.path else 'file'}"


def checked_jobs(path: Path, matrix: Matrix, specs: list[JobSpec], node: NodeFiles,
                 paths: NodePaths) -> list[tuple[JobSpec, Preflight]]:
    """Every job resolved on ``node`` and checked against its build and model before
    anything is written or started: each as it will run (files resolved) and as checked
    (renames applied). Errors name the matrix file and the place in it."""
    checked = []
    for spec in specs:
        try:
            resolved = resolve(spec, node)
            checked.append((resolved, preflight(resolved, node, paths)))
        except ConfigError as exc:
            raise type(exc)(f"{_where(path, matrix, spec, exc)}: {exc}", role=exc.role) from exc
    return checked


def _flags_checked(path: Path, matrix: Matrix, spec: JobSpec, node: NodeFiles) -> JobSpec:
    """The job's arms resolved and checked against their builds, its model left as written."""
    try:
        return check_arms(resolve_builds(spec, node), node)[0]
    except NotOnThisNode:
        raise
    except ConfigError as exc:
        raise type(exc)(f"{_where(path, matrix, spec, exc)}: {exc}", role=exc.role) from exc


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
            # The two-stage rule planned pairs beyond the least a job runs.
            self.bar.update(self.task, total=task.total + 1)
        self.bar.update(self.task, advance=1, description=(
            f"{self.label} · {result.key.arm} block {result.slot.block} · {tok_s:.1f} tok/s"))


def _execute(engine: Engine, specs: list[JobSpec], job_ids: list[int], node: NodeFiles,
             settings: Settings, console: Console, gpus: list[GpuInfo]) -> int:
    pending = [(spec, job_id) for spec, job_id in zip(specs, job_ids, strict=True)
               if repo.job_state(engine, job_id) != JobState.DONE]
    if len(pending) < len(specs):
        console.print(f"{len(specs) - len(pending)} of {len(specs)} jobs already done: skipped")
    # The least each job runs; its first stage may plan more.
    runs_each = [2 * job_design(s).least_pairs * len(s.prompts) * s.repetitions
                 for s, _ in pending]
    failed = 0
    progress = _Progress(console, sum(runs_each))
    with progress.bar:
        for index, (spec, job_id) in enumerate(pending, start=1):
            progress.job(index, len(pending), spec)
            sink = DbRunSink(engine, job_id)
            progress.bar.advance(progress.task, len(sink.done()))
            repo.mark_running(engine, job_id)
            try:
                outcome = execute_job(spec, sink, node=node, paths=NodePaths.of(settings),
                                      on_run=progress.run, gpus=gpus)
            except KeyboardInterrupt:
                repo.mark_finished(engine, job_id, JobState.QUEUED,
                                   "interrupted; `farm run` resumes")
                raise
            except FarmError as exc:
                repo.mark_finished(engine, job_id, JobState.FAILED, str(exc), exc.failure_class)
                console.print(f"[red]job {spec.job_key[:10]} failed:[/red] {exc}", markup=False)
                failed += 1
                continue
            repo.mark_finished(engine, job_id, JobState.DONE,
                               summary=job_summary(engine, job_id, outcome))
    return failed


def _one_class(path: Path, matrix: Matrix, gpu_class: str | None) -> str:
    if gpu_class is None and len(matrix.gpu_classes) == 1:
        return matrix.gpu_classes[0]
    if gpu_class in matrix.gpu_classes:
        return gpu_class
    raise ConfigError(f"{path}: gpu-classes: `farm run` runs on this one machine; pick one "
                      f"of {', '.join(matrix.gpu_classes)} with --gpu-class")


def dry_run_as_worker(path: Path, matrix: Matrix, specs: list[JobSpec], paths: NodePaths,
                      console: Console, allow_options: frozenset[str] = frozenset()) -> None:
    """`farm submit --dry-run`: each job checked as a worker would check it (names inside
    the models dir, builds by name) with this machine's builds and models. Without the
    model here, its flags are still checked against the build; without the build, the job
    is shown as written. Either way it says what was not checked."""
    node = local_files(paths, None, allow_options=allow_options)
    shown, unchecked = [], []
    for spec in specs:
        try:
            shown.append(checked_jobs(path, matrix, [spec], node, paths)[0][1].spec)
            continue
        except NotOnThisNode as exc:
            missing = exc
        try:
            shown.append(_flags_checked(path, matrix, spec, node))
            unchecked.append(f"job {spec.job_key[:12]}: flags checked against the build; "
                             f"not checked on this machine: {missing}")
        except NotOnThisNode:
            shown.append(spec)
            unchecked.append(f"job {spec.job_key[:12]} not checked on this machine: {missing}")
    print_dry_run(shown, console)
    for line in unchecked:
        console.print(line, markup=False, soft_wrap=True)


def run_local(path: Path, settings: Settings, console: Console, *, dry_run: bool,
              gpu_class: str | None = None, allow_options: frozenset[str] = frozenset(),
              allow_build_path: bool = False, gpus: list[GpuInfo] | None = None) -> str | None:
    """Validate, resolve, check, store and execute; returns the campaign, or None for a dry
    run (every check made, nothing written or started). ``allow_options``: harmless options
    beyond the allow-list (``farm run --allow-option``); ``allow_build_path``: the matrix's
    own build binaries may run. ``gpus``: the GPUs runs are pinned to and sampled on
    (default every GPU NVML sees).

    Raises ``FarmError`` subclasses; a failed job is reported and counted, not raised.
    """
    matrix, specs = load_matrix(path, allow_options)
    chosen = _one_class(path, matrix, gpu_class)
    paths = NodePaths.of(settings)
    node = local_files(paths, path.parent, allow_options=allow_options,
                       allow_build_path=allow_build_path)
    checked = checked_jobs(path, matrix, [s for s in specs if s.gpu_class == chosen], node,
                           paths)
    if dry_run:
        print_dry_run([check.spec for _, check in checked], wide_console())
        return None
    specs = [spec for spec, _ in checked]
    with connected(settings.database_url) as engine:
        upgrade(engine)
        job_ids = repo.register(engine, matrix.campaign, str(path.resolve()), specs)
        failed = _execute(engine, specs, job_ids, node, settings, console,
                          all_gpus() if gpus is None else gpus)
    if failed:
        raise JobsFailed(f"{failed} of {len(specs)} jobs failed; see `farm report "
                         f"{matrix.campaign}` and the server logs in {settings.logs_dir}",
                         matrix.campaign)
    return matrix.campaign
