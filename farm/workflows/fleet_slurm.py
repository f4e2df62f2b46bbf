"""``farm slurm launch``: an array of the worker's sbatch script with as many tasks as a GPU
class has pending jobs in the store, up to a cap; each task drains and exits when idle
(deploy/slurm/, docs/deployment.md "On Slurm")."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from farm.errors import ConfigError, RuntimeFarmError
from farm.gpus import ClassName
from farm.settings import Settings

# Where a checkout keeps the script; `--script` names another.
DEFAULT_SCRIPT = Path("deploy/slurm/specfarm-worker.sbatch")


@dataclass(frozen=True)
class Launched:
    """What ``farm slurm launch`` did: the class's pending jobs, the tasks submitted (0:
    none) and Slurm's id of their array job."""

    gpu_class: str
    pending: int
    tasks: int
    array_job: str | None


def _sbatch(argv: list[str]) -> str:
    """Run sbatch (never through a shell); its array job's id."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except FileNotFoundError:
        raise ConfigError("sbatch: not found; run `farm slurm launch` where Slurm's commands "
                          "are (a login node)") from None
    except subprocess.TimeoutExpired:
        raise RuntimeFarmError("sbatch did not answer within 120 s; check `sinfo`") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or ["no reason given"])[0][:300]
        raise RuntimeFarmError(f"sbatch refused the array: {why}")
    return done.stdout.strip().split(";")[0]


def launch(settings: Settings, gpu_class: str, cap: int, script: Path | None = None,
           sbatch_options: tuple[str, ...] = ()) -> Launched:
    """Submit ``min(pending jobs of gpu_class, cap)`` tasks of ``script`` (default:
    DEFAULT_SCRIPT) as one array, ``sbatch_options`` before the script (the caller's own,
    e.g. ``--time``)."""
    from farm.fleet.submit import require_fleet
    from farm.store.db import connected, require_current_schema
    from workers.fleet.allocation import pending_jobs

    try:
        TypeAdapter(ClassName).validate_python(gpu_class)
    except ValidationError:
        raise ConfigError(f"CLASS {gpu_class!r}: a GPU class is lower-case letters, digits and "
                          "._- (as in the matrix's gpu-classes)") from None
    script = script or DEFAULT_SCRIPT
    if not script.is_file():
        raise ConfigError(f"{script}: no such sbatch script; give --script PATH (a checkout "
                          f"has {DEFAULT_SCRIPT})")
    bad = [option for option in sbatch_options if not option.startswith("-")]
    if bad:
        raise ConfigError(f"sbatch option {bad[0]!r}: options only (--time=4:00:00), each "
                          "with its value after '='")
    require_fleet(settings)
    with connected(settings.database_url) as engine:
        require_current_schema(engine)
        pending = pending_jobs(engine, gpu_class)
    tasks = min(pending, cap)
    if not tasks:
        return Launched(gpu_class, pending, 0, None)
    array = _sbatch(["sbatch", "--parsable", f"--array=0-{tasks - 1}", *sbatch_options,
                     str(script), gpu_class])
    return Launched(gpu_class, pending, tasks, array)
