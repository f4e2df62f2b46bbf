"""What a node admits of a job before it downloads, builds or starts anything for it.

A job row is data: a worker parses it as a ``JobSpec`` (bounds, names, cmake options),
then :func:`admit` holds it to what a matrix load holds a matrix to (every flag on the
allow-list by name, each value of its type; every file a flag or the model names inside
the models dir, symlinks included; each download's place inside it) and to this node's
config (the sources it builds). `farm run` admits its jobs with the same function, so a
refused option or path costs neither a download nor a build; so does `farm submit`
(``on_coordinator``), so a refused row is never stored or posted. The checks that need the
build itself (its ``--help``) and the model's file run later (``workers.job.checks``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import partial
from pathlib import Path

from farm.errors import BuildUnavailable, ConfigError
from farm.matrix.flags import FlagValue
from farm.matrix.options import FILE_TYPES, ValueType, check_flag, value_type
from farm.matrix.schema import Matrix
from farm.matrix.sources import source_allowed
from farm.matrix.spec import BuildSource, JobSpec, ModelRef
from workers.job.resolve import NodeFiles, flag_items, flag_path, model_place
from workers.paths import NodePaths, downloaded_files


def check_allowed(source: BuildSource, allowed: Sequence[str] | None) -> None:
    """BuildUnavailable unless ``source.git`` is one the node's operator allows (``None``:
    ``farm run``, which builds what the user's own matrix names)."""
    if allowed is None or source_allowed(source.git, tuple(allowed)):
        return
    raise BuildUnavailable(
        f"source {source.git} is not allowed on this node (it builds only from: "
        f"{', '.join(allowed) or 'no source'}); building code is running it: add it to "
        "`sources:` in the worker config if you trust whoever may submit it")


def _check_flag(raw: str, value: FlagValue, where: str, node: NodeFiles,
                drafts: set[str]) -> None:
    """One flag of an arm: allowed by name, a value of its type, each file it names a
    name inside the models dir (a draft model of the job's own ``drafts`` aside)."""
    name, _ = check_flag(raw, value, where, node.allow_options)
    kind = value_type(name)
    if kind not in FILE_TYPES or kind is None or not isinstance(value, str) \
            or (kind is ValueType.MODEL_FILE and value in drafts):
        return
    try:
        for file, _ in flag_items(value, kind, f"--{name}"):
            flag_path(node, file, f"--{name}")
    except ConfigError as exc:
        raise type(exc)(f"{where}: {exc}") from exc


def _check_flags(spec: JobSpec, node: NodeFiles, admitted: set[Hashable]) -> None:
    drafts = {model.name for model in spec.draft_models}
    for arm in (spec.baseline, spec.variant):
        for raw, value in arm.flags:
            key = ("flag", raw, value, isinstance(value, str) and value in drafts)
            if key in admitted:
                continue
            try:
                _check_flag(raw, value, f"{arm.role} arm {arm.name!r}: flags", node, drafts)
            except ConfigError as exc:
                raise type(exc)(str(exc), role=arm.role) from exc
            admitted.add(key)


def _check_model(model: ModelRef, node: NodeFiles) -> None:
    if model.remote and (model.pinned or node.matrix_dir is None):
        downloaded_files(model, node.downloads_dir)  # each place inside the downloads dir
    elif not model.remote and node.matrix_dir is None:  # `farm run`: path: as written
        model_place(node, model.path or model.file or f"{model.name}.gguf",
                    f"model {model.name!r}")


def admit(spec: JobSpec, node: NodeFiles, sources: Sequence[str] | None,
          admitted: set[Hashable] | None = None) -> None:
    """Refuse a job this node must not start anything for: ConfigError for a flag, value
    or path no job may pass (the job fails as ``config``), BuildUnavailable for a source
    ``sources`` (the worker's config; None on `farm run`) does not allow. Downloads
    nothing, builds nothing, opens no file. ``admitted``: the flags and models of jobs
    admitted before on this node, not checked again (a campaign's jobs share most)."""
    admitted = set() if admitted is None else admitted
    _check_flags(spec, node, admitted)
    for model in (spec.model, *spec.draft_models):
        if ("model", model) not in admitted:
            _check_model(model, node)
            admitted.add(("model", model))
    for arm in (spec.baseline, spec.variant):
        if arm.build.source is not None:
            check_allowed(arm.build.source, sources)


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


def in_matrix(path: Path, matrix: Matrix, spec: JobSpec, exc: ConfigError) -> ConfigError:
    """``exc`` (a check of ``spec``, a job of ``matrix`` read from ``path``) as the same
    kind of error, its message led by the place in the file the job comes from."""
    return type(exc)(f"{_where(path, matrix, spec, exc)}: {exc}", role=exc.role)


def admit_jobs(path: Path, matrix: Matrix, specs: Sequence[JobSpec], node: NodeFiles,
               sources: Sequence[str] | None) -> None:
    """Every job admitted as a worker admits a row (``admit``), before anything is
    downloaded, built or stored; the first refusal names the file and the place in it."""
    admitted: set[Hashable] = set()
    for spec in specs:
        try:
            admit(spec, node, sources, admitted)
        except ConfigError as exc:
            raise in_matrix(path, matrix, spec, exc) from exc


def on_coordinator(paths: NodePaths, allow_options: frozenset[str] = frozenset(),
                   ) -> Callable[[Path, Matrix, Sequence[JobSpec]], None]:
    """How `farm submit` admits a matrix's jobs before it stores or posts one of them: as
    a worker admits its row, with the same ``allow_options``, and this machine's models
    and downloads dirs standing in for a worker's (every file a job names must be a name
    inside them). Not the sources: which workers build from which is each worker's
    config, that `farm submit` holds against the live workers' registrations."""
    node = NodeFiles(name="this machine", builds={}, models_dir=paths.models_dir,
                     downloads_dir=paths.downloads_dir, allow_options=allow_options)
    return partial(admit_jobs, node=node, sources=None)
