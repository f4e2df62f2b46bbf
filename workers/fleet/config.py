"""A worker's own configuration: its GPU class and devices, its builds, its models dir."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError

from farm.errors import ConfigError
from farm.matrix.options import check_allowances
from farm.matrix.schema import Strict
from farm.matrix.spec import SOURCE_BUILD_PREFIX
from farm.matrix.yaml_file import read_yaml
from farm.settings import SandboxMode
from workers.job.resolve import NodeFiles
from workers.paths import NodePaths
from workers.setup.builds import all_manifests

# A worker's name keys its row, its leases and refusals, and its own Redis queue
# (``worker.NAME``, farm.fleet.app.worker_queue): letters, digits and what a default
# name (CLASS@HOST-DEVICES) holds, never a space, a control character or a path.
WorkerName = Annotated[str, Field(min_length=1, max_length=200,
                                  pattern=r"^[A-Za-z0-9][A-Za-z0-9_.@,:+-]*$")]


class WorkerConfig(Strict):
    """A worker's config file, checked like a matrix: unknown keys are errors."""

    name: WorkerName | None = Field(None, description="Default CLASS@HOST-DEVICES.")
    gpu_class: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    devices: list[int] = Field(default_factory=list)
    models_dir: Path = Field(description="Default: FARM_MODELS_DIR.")
    downloads_dir: Path = Field(description="Where Hub and URL models are downloaded (a "
                                "folder the worker may write; the models dir may be "
                                "read-only). Default: FARM_DOWNLOADS_DIR, else the models "
                                "dir.")
    builds: dict[str, Path] = Field(default_factory=dict,
                                    description="Build name -> llama-server binary.")
    allow_options: list[str] = Field(
        default_factory=list, description="Harmless llama-server options beyond the farm's "
        "allow-list that jobs may pass on this node (a fork's, or one refused as 'not a "
        "benchmark option'); never one that runs programs, reaches the network or writes "
        "or reads files.")
    sources: list[str] = Field(
        default_factory=list, description="Git URLs or repositories this worker builds "
        "jobs' source builds from (`build: {git, ref}`), each commit in the sandbox. "
        "Empty: no source builds.")
    sandbox: SandboxMode | None = Field(
        None, description="`on`: every build and server of a commit runs in bubblewrap (no "
        "network, none of this worker's secrets, writes only to its build folder); `off` "
        "only where you trust every commit of every source, recorded on every run. "
        "Default: FARM_SANDBOX (on).")

    def files(self) -> NodeFiles:
        """What the worker runs jobs with: its builds and models dir, no matrix paths."""
        return NodeFiles(name=f"worker {self.worker_name}", builds=self.builds,
                         models_dir=self.models_dir, downloads_dir=self.downloads_dir,
                         allow_options=self.allowed_options)

    @property
    def allowed_options(self) -> frozenset[str]:
        """``allow-options`` as canonical names (checked when the config is loaded)."""
        return check_allowances(self.allow_options, "allow-options")

    @property
    def worker_name(self) -> str:
        """``name``, or ``CLASS@HOST-DEVICES``: one name per set of GPUs on a host."""
        devices = ",".join(map(str, self.devices)) or "cpu"
        return self.name or f"{self.gpu_class}@{socket.gethostname()}-{devices}"


def load_worker_config(path: Path | None, paths: NodePaths, *, gpu_class: str | None,
                       devices: list[int] | None, name: str | None = None) -> WorkerConfig:
    """The config file (if any) with the command line's class, devices and name on top.

    Without a models dir the node's (``FARM_MODELS_DIR``) is used; without a downloads dir
    the node's (``FARM_DOWNLOADS_DIR``) where it sets one apart, else the models dir;
    without builds, every build made by ``farm build`` on this node.
    """
    data = read_yaml(path) if path else {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a worker config is a YAML mapping")
    if gpu_class:
        data["gpu-class"] = gpu_class
    if devices is not None:
        data["devices"] = devices
    if name is not None:
        data["name"] = name
    data.setdefault("models-dir", str(paths.models_dir))
    # FARM_DOWNLOADS_DIR where the node sets one apart, else the models dir (the config's).
    data.setdefault("downloads-dir", data["models-dir"] if paths.downloads_dir ==
                    paths.models_dir else str(paths.downloads_dir))
    try:
        config = WorkerConfig.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ConfigError(f"{path or 'worker options'}: {problems}") from exc
    check_allowances(config.allow_options, f"{path or 'worker options'}: allow-options")
    if not config.builds:
        config = config.model_copy(update={"builds": {
            manifest.name: Path(manifest.server) for manifest in all_manifests(paths)
            if not manifest.name.startswith(SOURCE_BUILD_PREFIX)}})
    if not config.builds and not config.sources:
        raise ConfigError(f"{path or 'worker options'}: no builds; list them under `builds:` "
                          "(name: /path/to/llama-server), run `farm build`/`farm provision`, "
                          "or allow `sources:` to build jobs' commits from")
    for build, binary in config.builds.items():
        if not binary.is_file():
            raise ConfigError(f"{path}: builds.{build}: {binary} does not exist")
    return config
