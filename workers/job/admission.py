"""What a node admits of a job before it downloads, builds or starts anything for it.

A job row is data: a worker parses it as a ``JobSpec`` (bounds, names, cmake options),
then :func:`admit` holds it to what a matrix load holds a matrix to (every flag on the
allow-list by name, each value of its type; every file a flag or the model names inside
the models dir, symlinks included; each download's place inside it) and to this node's
config (the sources it builds). `farm run` admits its jobs with the same function, so a
refused option or path costs neither a download nor a build. The checks that need the
build itself (its ``--help``) and the model's file run later (``workers.job.checks``).
"""

from __future__ import annotations

from collections.abc import Sequence

from farm.errors import BuildUnavailable, ConfigError
from farm.matrix.options import FILE_TYPES, ValueType, check_flag, value_type
from farm.matrix.sources import source_allowed
from farm.matrix.spec import BuildSource, JobSpec
from workers.job.resolve import NodeFiles, flag_items, flag_path, model_place
from workers.paths import downloaded_files


def check_allowed(source: BuildSource, allowed: Sequence[str] | None) -> None:
    """BuildUnavailable unless ``source.git`` is one the node's operator allows (``None``:
    ``farm run``, which builds what the user's own matrix names)."""
    if allowed is None or source_allowed(source.git, tuple(allowed)):
        return
    raise BuildUnavailable(
        f"source {source.git} is not allowed on this node (it builds only from: "
        f"{', '.join(allowed) or 'no source'}); building code is running it: add it to "
        "`sources:` in the worker config if you trust whoever may submit it")


def _check_flags(spec: JobSpec, node: NodeFiles) -> None:
    drafts = {model.name for model in spec.draft_models}
    for arm in (spec.baseline, spec.variant):
        where = f"{arm.role} arm {arm.name!r}: flags"
        for raw, value in arm.flags:
            name, _ = check_flag(raw, value, where, node.allow_options)
            kind = value_type(name)
            if kind not in FILE_TYPES or kind is None or not isinstance(value, str) \
                    or (kind is ValueType.MODEL_FILE and value in drafts):
                continue
            try:
                for file, _ in flag_items(value, kind, f"--{name}"):
                    flag_path(node, file, f"--{name}")
            except ConfigError as exc:
                raise type(exc)(f"{where}: {exc}", role=arm.role) from exc


def admit(spec: JobSpec, node: NodeFiles, sources: Sequence[str] | None) -> None:
    """Refuse a job this node must not start anything for: ConfigError for a flag, value
    or path no job may pass (the job fails as ``config``), BuildUnavailable for a source
    ``sources`` (the worker's config; None on `farm run`) does not allow. Downloads
    nothing, builds nothing, opens no file."""
    _check_flags(spec, node)
    for model in (spec.model, *spec.draft_models):
        if model.remote and (model.pinned or node.matrix_dir is None):
            downloaded_files(model, node.downloads_dir)  # each place inside the downloads dir
        elif not model.remote and node.matrix_dir is None:  # `farm run`: path: as written
            model_place(node, model.path or model.file or f"{model.name}.gguf",
                        f"model {model.name!r}")
    for arm in (spec.baseline, spec.variant):
        if arm.build.source is not None:
            check_allowed(arm.build.source, sources)
