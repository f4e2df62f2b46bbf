"""``farm run``: check a matrix on this machine, then store and execute its jobs in-process
on the embedded store, telling a ``Progress`` what happens (the CLI prints it).

``check_matrix`` makes every check a run makes (nothing written or started: a dry run
stops there, printing each arm's ``arm_command``); ``run_matrix`` runs what it checked;
``check_as_worker`` checks jobs as a worker would (``farm submit --dry-run``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Protocol

from sqlalchemy import Engine

from farm.errors import ConfigError, FarmError, JobsFailed, ModelUnavailable
from farm.matrix.crossbuild import cross_build_specs
from farm.matrix.load import load_matrix
from farm.matrix.options import canonical
from farm.matrix.schema import Matrix
from farm.matrix.spec import ArmRole, JobSpec, ModelRef
from farm.settings import Settings
from farm.stats.design import StopDecision
from farm.store import repo
from farm.store.db import connected, upgrade
from farm.store.models import JobState
from farm.words import plural
from workers.job.admission import admit_jobs, in_matrix
from workers.job.checks import Preflight as Preflight  # arm_command's, for the CLI
from workers.job.checks import check_arms, preflight
from workers.job.resolve import NodeFiles, NotOnThisNode, resolve, resolve_builds
from workers.job.results import RunResult as RunResult  # Progress.run's, for the CLI
from workers.job.runtime.sandbox import Sandbox
from workers.job.runtime.server import server_argv
from workers.job.sinks import DbRunSink
from workers.job.telemetry import GpuInfo, all_gpus
from workers.lifecycle import Hold, build, measure, summarize
from workers.paths import NodePaths, downloaded_files, hub_file
from workers.setup.builds import built_here
from workers.setup.download import fetch_models
from workers.setup.hub import HubAccess, pin_specs


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
            raise in_matrix(path, matrix, spec, exc) from exc
    return checked


def _flags_checked(path: Path, matrix: Matrix, spec: JobSpec, node: NodeFiles,
                   paths: NodePaths) -> JobSpec:
    """The job's arms resolved and checked against their builds, its model left as written."""
    try:
        return check_arms(resolve_builds(spec, node), node, Sandbox(paths.sandbox))[0]
    except NotOnThisNode:
        raise
    except ConfigError as exc:
        raise in_matrix(path, matrix, spec, exc) from exc


class Progress(Protocol):
    """What ``run_matrix`` tells as it goes (the CLI draws a bar). Each step does nothing
    unless an implementation says otherwise (``Silent``: a selftest's)."""

    def start(self, pending: Sequence[JobSpec], skipped: int) -> None:
        """The ``pending`` jobs will run in this order (``skipped`` already done)."""
        return None

    def job(self, index: int, count: int, spec: JobSpec, runs_done: int) -> None:
        """Job ``index`` of ``count`` starts, with ``runs_done`` runs already stored."""
        return None

    def run(self, result: RunResult) -> None:
        """One run finished."""
        return None

    def decision(self, decision: StopDecision) -> None:
        """A pair finished: the job's stopping rule decided (its pairs: the plan so far)."""
        return None

    def failed(self, spec: JobSpec, error: FarmError) -> None:
        """A job failed (the campaign goes on)."""
        return None

    def close(self) -> None:
        """Every job ran (or the run was interrupted)."""
        return None


class Silent(Progress):
    """A ``Progress`` that says nothing."""


def _execute(engine: Engine, checked: CheckedMatrix, job_ids: list[int], settings: Settings,
             progress: Progress, gpus: list[GpuInfo]) -> int:
    pending = [(spec, job_id, seconds) for spec, job_id, seconds
               in zip(checked.specs, job_ids, checked.build_seconds, strict=True)
               if repo.job_state(engine, job_id) != JobState.DONE]
    progress.start([spec for spec, _, _ in pending], len(job_ids) - len(pending))
    failed = 0
    try:
        for index, (spec, job_id, build_seconds) in enumerate(pending, start=1):
            sink = DbRunSink(engine, job_id, settings.gpu_class)
            progress.job(index, len(pending), spec, len(sink.done()))
            repo.mark_running(engine, job_id)
            try:
                # As a worker measures (workers.lifecycle): no build of this node's workers
                # runs meanwhile (one that waits goes first between blocks).
                outcome = measure(spec, checked.node, NodePaths.of(settings), sink, Hold(
                    gpus=gpus, on_run=progress.run, on_decision=progress.decision))
            except KeyboardInterrupt:
                repo.mark_finished(engine, job_id, JobState.QUEUED,
                                   "interrupted; `farm run` resumes")
                raise
            except FarmError as exc:
                repo.mark_finished(engine, job_id, JobState.FAILED, str(exc), exc.failure_class)
                progress.failed(spec, exc)
                failed += 1
                continue
            summary = summarize(engine, job_id, outcome, build_seconds)
            repo.mark_finished(engine, job_id, JobState.DONE, summary=summary)
    finally:
        progress.close()
    return failed


def this_machine(settings: Settings, gpu_class: str | None,
                 as_class: str | None) -> tuple[str | None, str]:
    """The class to pick from a matrix (``--gpu-class``, or ``--as-class``) and the class
    this machine's runs join: its own (FARM_GPU_CLASS), or ``as_class`` when given."""
    if as_class is not None and gpu_class not in (None, as_class):
        raise ConfigError(f"--gpu-class {gpu_class} and --as-class {as_class} name two "
                          "classes: give one (--as-class picks the class it names)")
    return as_class or gpu_class, as_class or settings.gpu_class


def _one_class(path: Path, matrix: Matrix, gpu_class: str | None) -> str:
    if gpu_class is None and len(matrix.gpu_classes) == 1:
        return matrix.gpu_classes[0]
    if gpu_class in matrix.gpu_classes:
        return gpu_class
    raise ConfigError(f"{path}: gpu-classes: `farm run` runs on this one machine; pick one "
                      f"of {', '.join(matrix.gpu_classes)} with --gpu-class")


@dataclass(frozen=True)
class WorkerCheck:
    """``farm submit --dry-run``'s answer: each job as checked, and what was not checked
    on this machine."""

    shown: list[tuple[JobSpec, Preflight | None]]  # with its checks where they ran here
    unchecked: list[str] = field(default_factory=list)


def check_as_worker(path: Path, matrix: Matrix, specs: list[JobSpec], paths: NodePaths,
                    allow_options: frozenset[str] = frozenset()) -> WorkerCheck:
    """Each job checked as a worker would check it (names inside the models dir, builds by
    name) with this machine's builds and models. Without the model here, its flags are
    still checked against the build; without the build, the job is shown as written.
    Either way it says what was not checked."""
    node = built_here(paths, None, allow_options=allow_options)
    found = WorkerCheck([])
    for spec in specs:
        try:
            checked = checked_jobs(path, matrix, [spec], node, paths)[0][1]
            found.shown.append((checked.spec, checked))
            continue
        except NotOnThisNode as exc:
            missing = exc
        try:
            found.shown.append((_flags_checked(path, matrix, spec, node, paths), None))
            found.unchecked.append(f"job {spec.job_key[:12]}: flags checked against the "
                                   f"build; not checked on this machine: {missing}")
        except NotOnThisNode:
            found.shown.append((spec, None))
            found.unchecked.append(f"job {spec.job_key[:12]} not checked on this machine: "
                                   f"{missing}")
    return found


@dataclass(frozen=True)
class CheckedMatrix:
    """A matrix read and every job it runs here checked: what ``run_matrix`` runs."""

    path: Path
    matrix: Matrix
    checked: list[tuple[JobSpec, Preflight]]  # as it will run (files resolved), as checked
    node: NodeFiles
    # A dry run's jobs whose source builds are not made or whose models are not
    # downloaded here yet: as written, and why.
    unbuilt: list[tuple[JobSpec, str]] = field(default_factory=list)
    # A dry run's notes on models: what it could not pin, what a run would download.
    notes: list[str] = field(default_factory=list)
    # The seconds each checked job's source builds took here (0: none made for it).
    build_seconds: list[float] = field(default_factory=list)

    @property
    def specs(self) -> list[JobSpec]:
        """The jobs as they will run."""
        return [spec for spec, _ in self.checked]


def _models_here(path: Path, specs: list[JobSpec], settings: Settings,
                 say: Callable[[str], None], download: bool) -> tuple[list[JobSpec], list[str]]:
    """The jobs with their Hub models pinned, and each remote model downloaded here when
    ``download``; a dry run instead says what a run would download, or why it could not.
    Returns the jobs and, for a dry run, what it could not pin or find."""
    hub, downloads = HubAccess.of(settings), settings.downloads_dir
    notes: list[str] = []
    try:
        specs = pin_specs(specs, hub, downloads, say)
    except ModelUnavailable as exc:
        if download:
            raise ModelUnavailable(f"{path}: models: {exc}") from exc
        notes.append(f"not pinned: {exc}")
    if download:
        fetch_models(specs, downloads, hub, say)
        return specs, notes
    for model in {model.name: model for spec in specs
                  for model in (spec.model, *spec.draft_models) if model.remote}.values():
        if _on_node(model, downloads):
            continue
        size = sum(item.size or 0 for item in model.files)
        notes.append(f"model {model.name} ({model.source}) is not on this machine: `farm run` "
                     f"downloads it first" + (f" ({size / 1e9:.2f} GB)" if size else "")
                     + f" into {downloads}")
    return specs, notes


def check_matrix(path: Path, settings: Settings, *, gpu_class: str | None = None,
                 run_as: str | None = None, allow_options: frozenset[str] = frozenset(),
                 allow_build_path: bool = False,
                 allow_paths: tuple[Path, ...] = (),
                 make_builds: bool = True, ref: str | None = None,
                 pair_with: str | None = None,
                 pick: Callable[[Matrix, list[JobSpec]], tuple[Matrix, list[JobSpec]]]
                 | None = None,
                 say: Callable[[str], None] = lambda _line: None) -> CheckedMatrix:
    """Validate, resolve and check a matrix's jobs of one GPU class on this machine:
    everything a run checks, no job written or server started. ``run_as``: the class
    this machine's runs join (``this_machine``); none where nothing runs (``farm
    prepare``). ``allow_options``:
    harmless options beyond the allow-list (``farm run --allow-option``);
    ``allow_build_path``: the matrix's own build binaries may run; ``allow_paths``:
    folders beyond the models dir whose files the matrix's flags may name (``farm run
    --allow-path``); ``make_builds``: the
    matrix's source builds are made and its Hub and URL models downloaded here first
    (``say`` tells the progress; a dry run shows commits and what it would download
    instead). Hub revisions are pinned to commits either way. ``ref``: every source build
    at this ref (``farm track``); ``pair_with``: instead of the matrix's jobs, each of
    their arms on this older commit against the commit the matrix names
    (``farm.matrix.crossbuild``); ``pick``: the matrix and jobs to run instead of those
    read (``farm bisect``: one job, its step's campaign)."""
    matrix, specs = load_matrix(path, allow_options, ref)
    if pair_with is not None:
        specs = cross_build_specs(specs, pair_with)
    if pick is not None:
        matrix, specs = pick(matrix, specs)
    if gpu_class is None and run_as in matrix.gpu_classes:
        gpu_class = run_as  # of several classes, this machine's
    chosen = _one_class(path, matrix, gpu_class)
    if run_as is not None and chosen != run_as:
        raise ConfigError(
            f"{path}: gpu-classes: this machine is GPU class {run_as} (FARM_GPU_CLASS) and "
            f"the jobs to run are {chosen}: its runs would join {chosen}'s results and "
            f"history. Run them on {chosen}'s workers (`farm submit`), set "
            f"FARM_GPU_CLASS={chosen} on a machine of that class, or give --as-class "
            f"{chosen} to run them here anyway (each run records this machine's class)")
    paths = NodePaths.of(settings)
    node = replace(built_here(paths, path.parent, allow_options=allow_options,
                               allow_build_path=allow_build_path), allow_paths=allow_paths)
    specs = [s for s in specs if s.gpu_class == chosen]
    admit_jobs(path, matrix, specs, node, None)
    specs, notes = _models_here(path, specs, settings, say, make_builds)
    notes += _idle_drafters(matrix, specs)
    unbuilt, build_seconds = [], [0.0] * len(specs)
    if make_builds:
        hold = Hold(gpus=all_gpus(), say=say)
        for index, spec in enumerate(specs):  # admitted and fetched above, as a matrix
            built = build(spec, node, paths, None, hold)
            node, build_seconds[index] = built.files, built.build_seconds
    else:
        ready = [s for s in specs if _built(s, node) and all(
            _on_node(model, paths.downloads_dir) for model in (s.model, *s.draft_models))]
        unbuilt = [(s, "its source build is made, and its model downloaded, when the job "
                       "runs") for s in specs if s not in ready]
        for spec, _ in unbuilt:  # a named build is never made by a run: it must be here
            if _built(spec, node):
                resolve_builds(spec, node)
        specs, build_seconds = ready, [0.0] * len(ready)
    return CheckedMatrix(path, matrix, checked_jobs(path, matrix, specs, node, paths), node,
                         unbuilt, notes, build_seconds)


def _idle_drafters(matrix: Matrix, specs: list[JobSpec]) -> list[str]:
    """For a dry run: the arms that tune a drafter (``draft-max: 8``) but ask for none (no
    ``spec-type`` or ``spec-draft-model``), so will not draft; one line each, naming each
    flag as the matrix writes it."""
    written = [matrix.flags, *(variant.flags for variant in matrix.variants),
               *([matrix.engine_curve.flags] if matrix.engine_curve else [])]
    typed = {canonical(key, "flags"): key for flags in written for key in flags}
    found: dict[str, str] = {}
    for spec in specs:
        for arm in (spec.baseline, spec.variant):
            tuning = [typed.get(name, name) for name, _ in arm.flags
                      if name.startswith(("spec-", "draft"))]
            if tuning and not arm.speculates:
                found.setdefault(arm.name, (
                    f"arm {arm.name!r} sets {', '.join(f'`{name}`' for name in tuning)} but "
                    "asks for no drafter (no `spec-type` or `spec-draft-model`): it will not "
                    "draft; add `spec-type: ...` to its flags"))
    return list(found.values())


def _on_node(model: ModelRef, downloads_dir: Path) -> bool:
    """Whether a model is here: a local one as named (resolved later), a remote one pinned
    with every file downloaded."""
    return not model.remote or (model.pinned and all(
        place.is_file() for _, place in downloaded_files(model, downloads_dir)))


def _built(spec: JobSpec, node: NodeFiles) -> bool:
    """Whether every source build of the job is made on ``node``."""
    return all(arm.build.source is None or arm.build.source.local_name in node.builds
               for arm in (spec.baseline, spec.variant))


def _model_place(spec: JobSpec) -> str:
    """Where the arm's model will be on the node: in the models dir, a download in the
    downloads dir (a Hub model not yet pinned: under the commit its revision names then)."""
    model, downloads = spec.model, Path("DOWNLOADS_DIR")
    if model.remote and model.pinned:
        return str(downloaded_files(model, downloads)[0][1])
    if model.hf is not None:
        return str(hub_file(downloads, model.hf, f"COMMIT-OF-{model.revision}",
                            model.file or ""))
    return str(Path("MODELS_DIR") / (model.file or f"{model.name}.gguf"))


def arm_command(spec: JobSpec, role: ArmRole, checked: Preflight | None) -> list[str]:
    """The argv an arm's server runs with (``server_argv``, as each block starts it), the
    UNIX socket the farm makes for it shown as ``SOCKET``; ``--offline`` where the checked
    build knows it."""
    arm = spec.arm(role)
    offline = checked is not None and checked.probe(role).option("offline") is not None
    return server_argv(arm.build.path or f"<build {arm.build.name}>",
                       spec.model.path or _model_place(spec), arm.argv, socket="SOCKET",
                       parallel=spec.concurrency, offline=offline)


def pair_range(spec: JobSpec) -> tuple[int, int]:
    """The fewest and the most pairs of blocks a job runs (its design's stages)."""
    return spec.design.least_pairs, spec.design.max_pairs


def runs_per_pair(spec: JobSpec) -> int:
    """The runs of one pair of blocks: both arms, every prompt and repetition
    (simultaneous streams make one run)."""
    return 2 * len(spec.prompts) * spec.repetitions


def run_range(spec: JobSpec) -> tuple[int, int]:
    """The fewest and the most runs a job makes (``pair_range`` times ``runs_per_pair``)."""
    low, high = pair_range(spec)
    return low * runs_per_pair(spec), high * runs_per_pair(spec)


def run_matrix(checked: CheckedMatrix, settings: Settings, progress: Progress,
               gpus: list[GpuInfo] | None = None) -> str:
    """Store the checked jobs and execute those not done; returns the campaign. ``gpus``:
    the GPUs runs are pinned to and sampled on (default every GPU NVML sees).

    Raises ``FarmError`` subclasses; a failed job is told to ``progress`` and counted,
    then ``JobsFailed`` names how many.
    """
    matrix, specs = checked.matrix, checked.specs
    with connected(settings.database_url) as engine:
        upgrade(engine)
        job_ids = repo.register(engine, matrix.campaign, str(checked.path.resolve()), specs)
        failed = _execute(engine, checked, job_ids, settings, progress,
                          all_gpus() if gpus is None else gpus)
    if failed:
        raise JobsFailed(f"{failed} of {plural(len(specs), 'job')} failed; see `farm report "
                         f"{matrix.campaign}` and the server logs in {settings.logs_dir}",
                         matrix.campaign)
    return matrix.campaign
