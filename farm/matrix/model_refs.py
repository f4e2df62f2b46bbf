"""The models of a matrix as a job names them (``ModelRef``): a file name, a path the node
that runs the job resolves, a Hub model at its revision, or a URL with its file's sha256;
and the draft models, each named once, that an arm's file flags ask for."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from urllib.parse import urlsplit

from farm.errors import ConfigError
from farm.matrix.files import relative_file
from farm.matrix.flags import FlagMap
from farm.matrix.options import FILE_TYPES, value_type
from farm.matrix.schema import Matrix, ModelEntry
from farm.matrix.spec import ModelRef, RemoteFile


def model_ref(model: ModelEntry, path: Path) -> ModelRef:
    """A model entry as a job names it: a Hub model with its revision as written (pinned
    to a commit by `farm submit` / `farm run`), a URL model with its one file's sha256."""
    if model.url is not None and model.sha256 is not None:
        file = model.file or relative_file(
            PurePosixPath(urlsplit(model.url).path).name,
            f"{path}: model {model.name!r}: the file name its `url` ends in (or give `file:`)")
        return ModelRef(name=model.name, file=file, url=model.url,
                        files=(RemoteFile(name=file, sha256=model.sha256),))
    if model.hf is not None:
        return ModelRef(name=model.name, file=model.file, hf=model.hf,
                        revision=model.revision or "main")
    return ModelRef(name=model.name, file=model.file_name if model.path is None else None,
                    path=model.path)


def model_refs(matrix: Matrix, path: Path) -> list[ModelRef]:
    """Models as written: a ``file`` name, or a ``path`` the node that runs the job resolves
    (``workers.job.resolve.resolve``), or a Hub or URL source each node downloads."""
    refs = [model_ref(model, path) for model in matrix.models]
    names = [ref.name for ref in refs]
    if len(set(names)) != len(names):
        raise ConfigError(f"{path}: models: model names must be unique, got {names}")
    return refs


def draft_refs(matrix: Matrix, path: Path) -> dict[str, ModelRef]:
    """The matrix's ``draft-models`` by name, each name once."""
    drafts = {entry.name: model_ref(entry, path) for entry in matrix.draft_models}
    if len(drafts) != len(matrix.draft_models):
        raise ConfigError(f"{path}: draft-models: names must be unique, got "
                          f"{[entry.name for entry in matrix.draft_models]}")
    return drafts


def drafts_named(drafts: dict[str, ModelRef], *arms: FlagMap) -> tuple[ModelRef, ...]:
    """The draft models of ``drafts`` the arms' file flags name (by their entry's name)."""
    named = {value for flags in arms for name, value in flags.items()
             if isinstance(value, str) and value_type(name) in FILE_TYPES}
    return tuple(model for name, model in drafts.items() if name in named)
