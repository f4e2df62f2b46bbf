"""The fleet's verbs as steps on the store, the broker and this node, each returning what
``farm.cli.fleet`` renders: ``farm submit`` (the jobs pinned, checked as a worker would
or posted), ``status``, ``workers``, ``cancel``, and ``farm worker`` (its config, devices,
name and allocation checked, then served); and a workflow's jobs posted and waited for
(``post_and_wait``: a bisect's step, a tune's round)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from farm.errors import ConfigError, JobsFailed, ModelUnavailable
from farm.matrix.schema import Matrix
from farm.matrix.spec import JobSpec
from farm.settings import Settings

if TYPE_CHECKING:
    from celery import Celery

    from farm.fleet.status import CampaignStatus
    from farm.fleet.submit import Ended, SubmitResult
    from farm.runner import WorkerCheck
    from workers.fleet.allocation import Allocation
    from workers.fleet.config import WorkerConfig


def _pinned(path: Path, loaded: tuple[Matrix, list[JobSpec]], settings: Settings,
            say: Callable[[str], None]) -> tuple[Matrix, list[JobSpec]]:
    """The jobs with every Hub model's revision pinned to a commit, once, here: every
    worker then downloads the same bytes (huggingface_hub is loaded only when needed). A
    `tune:` matrix is raced round by round (``farm.cli.tune.run_tune``), never posted
    whole: its space would be the full grid."""
    matrix, specs = loaded
    if matrix.tune is not None:
        raise ConfigError(f"{path}: tune: a race is posted round by round: `farm submit "
                          f"{path}` races it on the fleet")
    if not any(spec.model.hf for spec in specs):
        return loaded
    from workers.setup.hub import HubAccess, pin_specs

    return matrix, pin_specs(specs, HubAccess.of(settings), settings.downloads_dir, say)


def check_as_submitted(matrix: Path, settings: Settings, allow: frozenset[str],
                       say: Callable[[str], None]) -> WorkerCheck:
    """``farm submit --dry-run``: every job checked as a worker would, with this machine's
    builds and models; a Hub revision that cannot be pinned is named, not fatal."""
    # Imported only here: the node's runner brings pandas, a second of start-up that a
    # 10,000-job submit cannot spare.
    from farm.matrix.load import load_matrix
    from farm.runner import check_as_worker
    from workers.paths import NodePaths

    loaded, note = load_matrix(matrix, allow), None
    try:
        loaded = _pinned(matrix, loaded, settings, say)
    except ModelUnavailable as exc:  # a dry run still shows the jobs (with the revision)
        note = f"not pinned: {exc}"
    found = check_as_worker(matrix, *loaded, NodePaths.of(settings), allow)
    return replace(found, unchecked=[*filter(None, [note]), *found.unchecked])


def submit_matrix(matrix: Path, settings: Settings, allow: frozenset[str], *,
                  retry_failed: bool, retry_cancelled: bool,
                  say: Callable[[str], None]) -> SubmitResult:
    """``farm submit``: MATRIX stored as a campaign, every job not done posted."""
    from farm.fleet.submit import submit
    from farm.matrix.load import load_matrix
    from farm.store.db import connected
    from workers.job.admission import on_coordinator
    from workers.paths import NodePaths

    app = fleet_app(settings)
    # Bad input fails before services are touched; Hub revisions are pinned before too.
    loaded = _pinned(matrix, load_matrix(matrix, allow), settings, say)
    with connected(settings.database_url) as engine:
        return submit(matrix, loaded, settings, app, engine,
                      admit=on_coordinator(NodePaths.of(settings), allow),
                      retry_failed=retry_failed, retry_cancelled=retry_cancelled)


def fleet_app(settings: Settings) -> Celery:
    """The fleet's Celery app, once its store and broker are set (``require_fleet``)."""
    from farm.fleet.app import make_app
    from farm.fleet.submit import require_fleet

    require_fleet(settings)
    return make_app(settings)


def post_and_wait(path: Path, loaded: tuple[Matrix, list[JobSpec]], settings: Settings,
                  app: Celery, say: Callable[[str], None]) -> list[Ended]:
    """A workflow's jobs posted to the workers of their GPU class as ``farm submit`` posts
    them (each admitted as a worker would admit it; a failed one not posted again), then
    waited for in the store: how each ended, all done. A job no worker can run is a
    ConfigError naming it, one that did not finish JobsFailed. A caller stopped while
    waiting leaves the jobs to the fleet: the same call posts nothing twice."""
    from farm.fleet.submit import submit, wait_ended
    from farm.store.db import connected
    from farm.words import plural
    from workers.job.admission import on_coordinator
    from workers.paths import NodePaths

    matrix, specs = loaded
    with connected(settings.database_url) as engine:
        submitted = submit(path, loaded, settings, app, engine,
                           admit=on_coordinator(NodePaths.of(settings)), retry_failed=False)
        if submitted.unrunnable:
            spec, reason = submitted.unrunnable[0]
            raise ConfigError(f"{path}: job {spec.job_key[:10]} of {matrix.campaign} cannot "
                              f"run on the fleet: {reason}")
        say(f"{matrix.campaign}: on the workers of class {specs[0].gpu_class} "
            f"({plural(len(specs), 'job')}; Ctrl-C leaves them to the fleet; the same "
            "command resumes)")
        ended = [wait_ended(engine, spec.job_key, say) for spec in specs]
    for spec, end in zip(specs, ended, strict=True):
        if end.state != "done":
            raise JobsFailed(f"job {spec.job_key[:12]} {end.state} ({end.failure_class}): "
                             f"{end.error}", matrix.campaign)
    return ended


def campaign_progress(settings: Settings, campaign: str | None) -> CampaignStatus:
    """``farm status``: CAMPAIGN's (default: the latest) jobs by state, owners, failures."""
    from farm.fleet.status import campaign_status
    from farm.store.db import open_store
    from farm.store.leases import beat_seconds

    # Embedded jobs never go through a broker: none waits to be posted.
    repost_after = None if settings.embedded else settings.repost_after
    beat = None if settings.embedded else beat_seconds(settings.lease_seconds)
    with open_store(settings) as engine:
        return campaign_status(engine, campaign, repost_after, beat)


def fleet_workers(settings: Settings) -> list[tuple[object, ...]]:
    """``farm workers``: every registered worker as a row, live or not."""
    from farm.fleet.status import worker_rows
    from farm.fleet.submit import require_fleet
    from farm.store.db import connected
    from farm.store.leases import beat_seconds

    require_fleet(settings)
    with connected(settings.database_url) as engine:
        return worker_rows(engine, beat_seconds(settings.lease_seconds), settings.lease_seconds)


def cancel_campaign(settings: Settings, campaign: str) -> int:
    """``farm cancel``: CAMPAIGN's pending jobs cancelled, its running ones stopped."""
    from farm.fleet.submit import cancel, require_fleet
    from farm.store.db import connected

    require_fleet(settings)
    with connected(settings.database_url) as engine:
        return cancel(engine, campaign)


@dataclass(frozen=True)
class WorkerOptions:
    """``farm worker``'s options as given: the allocation's three as strings (checked
    here, each with a one-line error naming it)."""

    gpu_class: str | None = None
    devices: list[int] | None = None
    devices_shown: str | None = None
    config_path: Path | None = None
    name: str | None = None
    exit_when_idle: str | None = None
    max_jobs: str | None = None
    deadline: str | None = None


@dataclass(frozen=True)
class PreparedWorker:
    """A worker ready to serve: its config and what bounds its life (None: nothing)."""

    config: WorkerConfig
    allocation: Allocation | None

    @property
    def first_build(self) -> dict[str, str]:
        """The config's first build, as ``farm selftest`` takes one."""
        name, binary = next(iter(self.config.builds.items()))
        return {"name": name, "path": str(binary)}

    @property
    def devices(self) -> list[int]:
        """The GPU indices it runs on (none: the CPU)."""
        return list(self.config.devices)


def worker_deadline(options: WorkerOptions, environment: Mapping[str, str]) -> str | None:
    """``--deadline`` as given, else under Slurm (``SLURM_JOB_ID`` in ``environment``)
    the allocation's end as an ISO time (None: no time limit)."""
    if options.deadline is not None or not environment.get("SLURM_JOB_ID"):
        return options.deadline
    from workers.fleet.allocation import slurm_end

    array, task = environment.get("SLURM_ARRAY_JOB_ID"), environment.get("SLURM_ARRAY_TASK_ID")
    job = f"{array}_{task}" if array and task else environment["SLURM_JOB_ID"]
    end = slurm_end(job, environment.get("SLURM_JOB_END_TIME"))
    return end.isoformat() if end else None


def prepare_worker(settings: Settings, options: WorkerOptions,
                   environment: Mapping[str, str]) -> PreparedWorker:
    """``farm worker``'s checks before it serves: options, config, GPUs, its own name."""
    from workers.fleet.allocation import parse_allocation
    from workers.fleet.config import load_worker_config
    from workers.paths import NodePaths

    bounds = (options.exit_when_idle, options.max_jobs, worker_deadline(options, environment))
    allocation = (parse_allocation(*bounds, now=datetime.now(UTC))
                  if any(bound is not None for bound in bounds) else None)
    config = load_worker_config(options.config_path, NodePaths.of(settings),
                                gpu_class=options.gpu_class, devices=options.devices,
                                name=options.name)
    if config.devices:
        from workers.job.telemetry.nvml import require_gpus

        require_gpus(config.devices, f"--devices {options.devices_shown}"
                     if options.devices_shown else f"{options.config_path}: devices")
    _require_own_name(settings, config.worker_name)
    return PreparedWorker(config, allocation)


def serve_worker(settings: Settings, prepared: PreparedWorker) -> None:
    """Run the prepared worker until it is stopped, idle, done or at its deadline."""
    from workers.fleet.daemon import run_worker

    run_worker(settings, prepared.config, prepared.allocation)


def _require_own_name(settings: Settings, name: str) -> None:
    """Refuse to start a second worker under a name a running one of this host has (two
    workers of one class and devices get the same default name)."""
    import socket

    from farm.fleet.submit import require_fleet
    from farm.store.db import connected, require_current_schema
    from farm.store.registry import running_namesake

    require_fleet(settings)
    with connected(settings.database_url) as engine:
        require_current_schema(engine)
        pid = running_namesake(engine, name, socket.gethostname())
    if pid is not None:
        raise ConfigError(f"worker {name} already runs on this host (pid {pid}): give this one "
                          "its own `name:` in its --config file (the default, CLASS@HOST-"
                          "DEVICES, is the same for two workers of one class and devices)")

