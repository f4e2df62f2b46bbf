"""A job resolved against the files of the node that runs it: builds and models by name.

``farm run`` and ``farm worker`` resolve a job through the same :func:`resolve` with the
same rules; they differ only in the :class:`NodeFiles` they pass
(``workers.setup.builds.built_here``, ``workers.fleet.config.WorkerConfig.files``):
``farm run`` also honours a matrix's own model ``path:`` (relative to the matrix file),
and its build ``path:`` only when asked to (``--allow-build-path``: opening someone's
matrix must not run their binary); a worker only names inside its models dir and builds
dir. Files that flags name are resolved after the flags are checked
(``workers/job/checks.py``), by their option's type: inside the models dir (on `farm
run`, also under a folder given by ``--allow-path``: a matrix someone hands over must not
read the user's files). Every name is joined by ``farm.matrix.files.under``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError
from farm.matrix.files import file_problem, inside, near_names, under
from farm.matrix.options import FILE_TYPES, ValueType, value_type
from farm.matrix.spec import Arm, BuildRef, JobSpec, ModelRef
from workers.paths import downloaded_files


class NotOnThisNode(ConfigError):
    """The job names a build or a model file this node does not have."""


@dataclass(frozen=True)
class NodeFiles:
    """The files a node runs jobs with, and what a matrix may ask of it."""

    name: str
    builds: Mapping[str, Path]  # build name -> llama-server
    models_dir: Path
    downloads_dir: Path  # Hub and URL models (workers.paths.downloaded_files)
    # `farm run`: the matrix file's directory, against which its own `path:` entries for
    # models and draft models resolve. None on a worker: names only.
    matrix_dir: Path | None = None
    # Harmless options this node lets jobs pass beyond the allow-list (farm.matrix.options).
    allow_options: frozenset[str] = frozenset()
    # `farm run --allow-build-path`: the matrix's own build `path:` may be executed.
    allow_build_path: bool = False
    # `farm run --allow-path DIR`: folders beside the models dir whose files flags may name.
    allow_paths: tuple[Path, ...] = ()


def _did_you_mean(path: Path) -> str:
    """``path``'s nearest neighbours in its folder by name (a typo's likely fix), as a
    clause to add to the message; empty when there are none."""
    close = near_names(path.parent, path.name)
    return f" (did you mean {' or '.join(repr(name) for name in close)}?)" if close else ""


def _existing(path: Path, what: str, fix: str) -> str:
    if not path.is_file():
        raise NotOnThisNode(f"{what}: {path} does not exist{_did_you_mean(path)}; {fix}")
    return str(path.resolve())


def _inside(node: NodeFiles, value: str, what: str, place: Path | None = None) -> str:
    """The file ``value`` names in the models dir (``place``, when already made)."""
    root = node.models_dir
    candidate = place or under(root, value, what=what)
    if not candidate.is_file():
        raise NotOnThisNode(f"{what} {value!r} not found in the models dir {root} of "
                            f"{node.name}{_did_you_mean(candidate)}; run `farm provision`, "
                            "set FARM_MODELS_DIR, or put the file there")
    return str(candidate)


def model_place(node: NodeFiles, value: str, what: str) -> Path:
    """Where a worker looks for a model the matrix gives by ``path:``: a name inside its
    models dir, or an absolute path that lies there (resolved); ConfigError otherwise."""
    given = Path(value)
    if given.is_absolute():
        if not inside(given, node.models_dir):
            raise ConfigError(f"{what} {value!r} is outside the models dir {node.models_dir} "
                              f"of {node.name}; jobs read models from there only (give a "
                              "name inside it)")
        value = str(given.resolve().relative_to(node.models_dir.resolve()))
    return under(node.models_dir, value, what=what)


def _model_path(node: NodeFiles, value: str, what: str) -> str:
    """A model the matrix gives by ``path:``: as written on `farm run` (relative to the
    matrix file), inside the models dir on a worker."""
    if node.matrix_dir is None:
        return _inside(node, value, what, model_place(node, value, what))
    return _existing(node.matrix_dir / Path(value).expanduser(), what,
                     "fix the path (relative paths start at the matrix file)")


def flag_path(node: NodeFiles, value: str, what: str) -> Path | None:
    """Where a file a flag names is, when `farm run` finds it as written (relative to the
    matrix file) in the models dir or under a folder of ``--allow-path``; None for a name
    the models dir resolves (a worker's only kind). ConfigError for a path outside them
    (its fix: ``--allow-path``), or a name that climbs out of the models dir."""
    if node.matrix_dir is None:
        under(node.models_dir, value, what=what)
        return None
    given = (node.matrix_dir / Path(value).expanduser()).resolve()
    allowed = any(inside(given, root) for root in (node.models_dir, *node.allow_paths))
    if given.is_file() and allowed:
        return given
    if file_problem(value) is None and (
            not given.is_file() or under(node.models_dir, value, what=what).is_file()):
        under(node.models_dir, value, what=what)
        return None
    if allowed:
        raise NotOnThisNode(f"{what} {value!r}: {given} does not exist; fix the path "
                            "(relative paths start at the matrix file)")
    raise ConfigError(f"{what} {value!r} ({given}) is outside the models dir "
                      f"{node.models_dir}: `farm run` lets a matrix's flags read files "
                      "there only; if you trust this matrix, pass --allow-path "
                      f"{given.parent} (repeatable) to let it read that folder's files")


def _flag_file(node: NodeFiles, value: str, what: str) -> str:
    """A file a flag names (a draft model): ``flag_path``, or a name inside the models
    dir."""
    given = flag_path(node, value, what)
    return str(given) if given is not None else _inside(node, value, what)


def _registered(build: BuildRef, node: NodeFiles) -> bool:
    """Whether ``build.path`` is the binary this node registered under the build's name
    (`farm build`, `farm provision`): running it needs no opt-in."""
    known = node.builds.get(build.name)
    return (known is not None and build.path is not None
            and Path(build.path).expanduser().resolve() == known.resolve())


def _resolve_build(build: BuildRef, node: NodeFiles) -> BuildRef:
    """The build's llama-server; errors carry role "build" (the matrix's `build:` key)."""
    if build.source is not None:
        binary = node.builds.get(build.source.local_name)
        if binary is None:
            raise NotOnThisNode(f"build {build.name!r} ({build.source.git} at "
                                f"{build.source.commit[:12]}) is not made on {node.name} yet",
                                role="build")
        return build.model_copy(update={"path": str(binary)})
    if build.path is not None and node.matrix_dir is not None and not _registered(build, node):
        if not node.allow_build_path:
            raise ConfigError(
                f"build {build.name!r} names its own binary ({build.path}); `farm run` runs "
                "a matrix's binary only when asked: pass --allow-build-path if you trust it, "
                f"or register it once with `farm build {build.name} --binary PATH` and name "
                f"it `build: {build.name}`", role="build")
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
                            f"(it makes 'cpu'), `farm build {build.name} ...`, or register a "
                            f"binary with `farm build {build.name} --binary PATH`", role="build")
    return BuildRef(name=build.name, path=str(binary))


def flag_items(value: str, kind: ValueType, what: str) -> list[tuple[str, str | None]]:
    """The files a file-typed value names, each with its scale (``FILE:SCALE`` pairs)."""
    if kind is ValueType.MODEL_FILE:
        return [(value, None)]
    if kind is not ValueType.MODEL_FILES_SCALED:
        return [(item, None) for item in value.split(",")]
    pairs: list[tuple[str, str | None]] = [item.rpartition(":")[::2]
                                           for item in value.split(",")]
    if not all(name for name, _ in pairs):
        raise ConfigError(f"{what} {value!r}: give FILE:SCALE pairs")
    return pairs


def _resolve_files(value: str, kind: ValueType, node: NodeFiles, what: str,
                   drafts: Mapping[str, str]) -> str:
    """A file-typed value with each file it names resolved on ``node`` (a draft model of
    the job's, by name, to its download)."""
    if kind is ValueType.MODEL_FILE and value in drafts:
        return drafts[value]
    return ",".join(_flag_file(node, name, what) + ("" if scale is None else f":{scale}")
                    for name, scale in flag_items(value, kind, what))


def draft_files(spec: JobSpec, node: NodeFiles) -> dict[str, str]:
    """The job's downloaded draft models by name, on ``node``; NotOnThisNode if missing."""
    return {model.name: _downloaded(node, model) for model in spec.draft_models}


def resolve_flag_files(arm: Arm, node: NodeFiles,
                       drafts: Mapping[str, str] | None = None) -> Arm:
    """The arm with every file its (checked, canonical) flags name resolved inside the
    models dir (on `farm run`, or as written relative to the matrix file); a name of
    ``drafts`` (the job's downloaded draft models) to its file."""
    flags = []
    for name, value in arm.flags:
        kind = value_type(name)
        if kind in FILE_TYPES and isinstance(value, str) and kind is not None:
            try:
                value = _resolve_files(value, kind, node, f"--{name}", drafts or {})
            except ConfigError as exc:
                raise type(exc)(f"{arm.role} arm {arm.name!r}: {exc}", role=arm.role) from exc
        flags.append((name, value))
    return arm.model_copy(update={"flags": tuple(flags)})


def resolve_builds(spec: JobSpec, node: NodeFiles) -> JobSpec:
    """The job with both arms' builds resolved on ``node`` (the model as written)."""
    return spec.model_copy(update={
        "baseline": spec.baseline.model_copy(
            update={"build": _resolve_build(spec.baseline.build, node)}),
        "variant": spec.variant.model_copy(
            update={"build": _resolve_build(spec.variant.build, node)})})


def _downloaded(node: NodeFiles, model: ModelRef) -> str:
    """A remote model's first file where the node keeps downloads, every shard present;
    NotOnThisNode naming what is missing."""
    if not model.pinned:
        raise NotOnThisNode(f"model {model.name!r} ({model.source}) is not pinned to a commit "
                            "and its files' sha256 (the Hub was not reached), so nothing "
                            "here can be checked against it")
    places = [place for _, place in downloaded_files(model, node.downloads_dir)]
    missing = [str(place) for place in places if not place.is_file()]
    if missing:
        raise NotOnThisNode(f"model {model.name!r} ({model.source}) is not downloaded on "
                            f"{node.name}: missing {', '.join(missing)}; `farm prepare` "
                            "downloads it, and so do a worker and `farm run` that reach "
                            "its source")
    return str(places[0])


def resolve(spec: JobSpec, node: NodeFiles) -> JobSpec:
    """The job with its builds and model resolved on ``node``, or ConfigError
    (NotOnThisNode when a build or file is missing here). Flags stay as written: they are
    checked against the build before the files they name are looked up. A remote model
    is looked up where downloads go (``workers.setup.download`` fetches it before)."""
    model = spec.model
    what = f"model {model.name!r}"
    if model.remote:
        path = _downloaded(node, model)
    elif model.path is not None:
        path = _model_path(node, model.path, what)
    else:
        path = _inside(node, model.file or f"{model.name}.gguf", what)
    return resolve_builds(spec, node).model_copy(update={
        "model": model.model_copy(update={"path": path})})


def flag_files(arm: Arm) -> list[Path]:
    """The files the arm's resolved file-typed flags name (a draft model, LoRAs, control
    vectors, a projector): what its server reads besides its binary and model."""
    found: list[Path] = []
    for name, value in arm.flags:
        kind = value_type(name)
        if kind in FILE_TYPES and kind is not None and isinstance(value, str):
            found += [Path(file) for file, _ in flag_items(value, kind, f"--{name}")]
    return found
