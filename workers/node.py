"""What a node is and may do: its advertisement, and jobs resolved against its files.

``farm run`` and ``farm worker`` resolve a job through the same :func:`resolve` with the
same rules; they differ only in the :class:`NodeFiles` they pass: ``farm run`` also honours
a matrix's own ``path:`` (relative to the matrix file), a worker only names inside its
models dir and builds dir.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError
from farm.matrix.spec import Arm, BuildRef, JobSpec, ModelRef
from workers.builds import all_manifests
from workers.config import WorkerConfig
from workers.paths import NodePaths
from workers.runtime.probe import probe_binary


class NotOnThisNode(ConfigError):
    """The job names a build or a model file this node does not have."""


@dataclass(frozen=True)
class NodeFiles:
    """The files a node runs jobs with, and what a matrix may ask of it."""

    name: str
    builds: Mapping[str, Path]  # build name -> llama-server
    models_dir: Path
    # `farm run`: the matrix file's directory, against which its own `path:` entries for
    # models, builds and draft models resolve. None on a worker: names only.
    matrix_dir: Path | None = None
    allow_file_flags: bool = False


def worker_files(config: WorkerConfig) -> NodeFiles:
    """What a worker runs jobs with: its configured builds and models dir, no matrix paths."""
    return NodeFiles(name=f"worker {config.worker_name}", builds=config.builds,
                     models_dir=config.models_dir, allow_file_flags=config.allow_file_flags)


def local_files(paths: NodePaths, matrix_dir: Path | None, *,
                allow_file_flags: bool) -> NodeFiles:
    """This machine, with every build `farm build`/`farm provision` made here; with a
    ``matrix_dir`` (`farm run`) the matrix's own paths count too."""
    builds = {manifest.name: Path(manifest.server) for manifest in all_manifests(paths)}
    return NodeFiles(name="this machine", builds=builds, models_dir=paths.models_dir,
                     matrix_dir=matrix_dir, allow_file_flags=allow_file_flags)

# Flags that make llama-server write files on the node: refused unless the node allows it.
WRITES_FILES = frozenset({"log-file", "slot-save-path", "path", "media-path"})
# Flags whose value is a file the server reads: resolved inside the models dir.
READS_MODEL_FILES = frozenset({"spec-draft-model", "model-draft", "md", "lora", "mmproj",
                               "control-vector", "lora-scaled"})


@dataclass(frozen=True)
class Advertisement:
    """What a worker tells the coordinator about itself when it registers."""

    host: str
    builds: dict[str, str]  # build name -> `llama-server --version`
    models: list[str]  # GGUF files in the models dir, relative to it


def advertise(config: WorkerConfig) -> Advertisement:
    """This worker's host, each build's ``--version``, and the GGUF files in its models dir."""
    builds = {name: probe_binary(path).version for name, path in config.builds.items()}
    root = config.models_dir
    models = sorted(str(p.relative_to(root)) for p in root.rglob("*.gguf")) if root.is_dir() \
        else []
    return Advertisement(host=socket.gethostname(), builds=builds, models=models)


def _existing(path: Path, what: str, fix: str) -> str:
    if not path.is_file():
        raise NotOnThisNode(f"{what}: {path} does not exist; {fix}")
    return str(path.resolve())


def _inside(node: NodeFiles, value: str, what: str) -> str:
    root = node.models_dir
    candidate = (root / value).resolve()
    if not candidate.is_relative_to(root.resolve()):
        raise ConfigError(f"{what} {value!r} is outside the models dir {root} of {node.name}; "
                          "jobs read models from there only (give a name inside it)")
    if not candidate.is_file():
        raise NotOnThisNode(f"{what} {value!r} not found in the models dir {root} of "
                            f"{node.name}; run `farm provision`, set FARM_MODELS_DIR, or put "
                            "the file there")
    return str(candidate)


def _model_path(node: NodeFiles, value: str, what: str) -> str:
    """A model the matrix gives by ``path:``: as written on `farm run` (relative to the
    matrix file), inside the models dir on a worker."""
    if node.matrix_dir is None:
        return _inside(node, value, what)
    return _existing(node.matrix_dir / Path(value).expanduser(), what,
                     "fix the path (relative paths start at the matrix file)")


def _flag_file(node: NodeFiles, value: str, what: str) -> str:
    """A file a flag names (a draft model): on `farm run` a path that exists as written
    (relative to the matrix file) wins, otherwise a name inside the models dir."""
    if node.matrix_dir is not None:
        given = node.matrix_dir / Path(value).expanduser()
        if given.is_file():
            return str(given.resolve())
    return _inside(node, value, what)


def _resolve_build(build: BuildRef, node: NodeFiles) -> BuildRef:
    """The build's llama-server; errors carry role "build" (the matrix's `build:` key)."""
    if build.path is not None and node.matrix_dir is not None:
        try:
            path = _existing(node.matrix_dir / Path(build.path).expanduser(),
                             f"llama-server of build {build.name!r}", "fix build.path")
        except NotOnThisNode as exc:
            raise NotOnThisNode(str(exc), role="build") from exc
        return BuildRef(name=build.name, path=path)
    binary = node.builds.get(build.name)
    if binary is None:
        raise NotOnThisNode(f"build {build.name!r} is not on {node.name} (it has: "
                            f"{', '.join(sorted(node.builds)) or 'none'}); run `farm provision` "
                            f"(it makes 'cpu'), `farm build {build.name} ...`, or give build: "
                            "{name: ..., path: /path/to/llama-server}", role="build")
    return BuildRef(name=build.name, path=str(binary))


def _resolve_arm(arm: Arm, node: NodeFiles) -> Arm:
    flags = []
    for name, value in arm.flags:
        if name in WRITES_FILES and not node.allow_file_flags:
            raise ConfigError(f"{arm.role} arm {arm.name!r}: --{name} writes files on "
                              f"{node.name}; refused unless allowed (`farm run "
                              "--allow-file-flags`, or `allow-file-flags: true` in a worker's "
                              "config)", role=arm.role)
        if name in READS_MODEL_FILES and isinstance(value, str):
            try:
                value = _flag_file(node, value, f"--{name}")
            except ConfigError as exc:
                raise type(exc)(f"{arm.role} arm {arm.name!r}: {exc}", role=arm.role) from exc
        flags.append((name, value))
    return arm.model_copy(update={"flags": tuple(flags),
                                  "build": _resolve_build(arm.build, node)})


def resolve_arms(spec: JobSpec, node: NodeFiles) -> JobSpec:
    """The job with its builds and file flags resolved on ``node`` (the model as written)."""
    return spec.model_copy(update={"baseline": _resolve_arm(spec.baseline, node),
                                   "variant": _resolve_arm(spec.variant, node)})


def resolve(spec: JobSpec, node: NodeFiles) -> JobSpec:
    """The job with its builds, model and file flags resolved on ``node``, or ConfigError
    (NotOnThisNode when a build or file is missing here)."""
    model = spec.model
    what = f"model {model.name!r}"
    path = (_model_path(node, model.path, what) if model.path is not None
            else _inside(node, model.file or f"{model.name}.gguf", what))
    return resolve_arms(spec, node).model_copy(update={
        "model": ModelRef(name=model.name, file=model.file, path=path)})
