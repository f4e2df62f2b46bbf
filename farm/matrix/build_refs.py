"""The builds of a matrix as a job names them (``BuildRef``): a build by name or path, or a
source build at the commit its ref names at load (``resolve_refs``: once per source and
ref, so that a moving ref names one commit for the whole campaign); and a matrix moved to
another ref (``at_ref``, ``farm track``)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from farm.errors import ConfigError
from farm.matrix.schema import BuildEntry, Matrix
from farm.matrix.sources import (
    REF_PATTERN,
    check_cmake_option,
    resolve_commit,
    source_location,
)
from farm.matrix.spec import BuildRef, BuildSource

Commits = dict[tuple[str, str], str]  # (source location, ref) -> the commit it names


def build_ref(entry: BuildEntry | str, base: Path, commits: Commits) -> BuildRef:
    """A build entry as a job names it; a source build at the commit ``commits`` gives its
    ref (``base``: the matrix's folder, for a relative ``git`` path)."""
    if isinstance(entry, str):
        return BuildRef(name=entry)
    if entry.git is None or entry.ref is None:
        return BuildRef(name=entry.name, path=entry.path)
    git = source_location(entry.git, base)
    commit = commits.get((git, entry.ref))
    if commit is None:
        raise ConfigError(f"build {entry.name!r}: ref {entry.ref!r} of {git} is not resolved "
                          "to a commit; load the matrix with load_matrix")
    return BuildRef(name=entry.name, source=BuildSource(
        git=git, ref=entry.ref, commit=commit, backend=entry.backend,
        cuda_arch=entry.cuda_arch, cmake=tuple(entry.cmake)))


def _source_entries(matrix: Matrix) -> Iterator[tuple[str, BuildEntry]]:
    """Every build entry of the matrix that names a source, with its key path."""
    entries = matrix.build if isinstance(matrix.build, list) else [matrix.build]
    for index, entry in enumerate(entries):
        if isinstance(entry, BuildEntry) and entry.git is not None:
            yield (f"build[{index}]" if isinstance(matrix.build, list) else "build"), entry
    for index, variant in enumerate(matrix.variants):
        if isinstance(variant.build, BuildEntry) and variant.build.git is not None:
            yield f"variants[{index}].build", variant.build


def resolve_refs(matrix: Matrix, path: Path) -> Commits:
    """Each source build's ref resolved to the commit it names now, once per source and
    ref (``farm.matrix.sources.resolve_commit``); errors name the file and the key."""
    commits: Commits = {}
    for where, entry in _source_entries(matrix):
        if entry.ref is None or entry.git is None:
            continue
        for number, arg in enumerate(entry.cmake):
            check_cmake_option(arg, f"{path}: {where}.cmake[{number}]")
        git = source_location(entry.git, path.parent)
        if (git, entry.ref) not in commits:
            commits[git, entry.ref] = resolve_commit(git, entry.ref, f"{path}: {where}")
    return commits


def at_ref(matrix: Matrix, path: Path, ref: str) -> Matrix:
    """``matrix`` with every source build at ``ref`` instead of its own (``farm track``)."""
    if next(_source_entries(matrix), None) is None:
        raise ConfigError(f"{path}: build: `farm track` follows a source build and this "
                          "matrix names none; give `build: {name, git, ref}` "
                          "(docs/builds.md)")
    if not re.match(REF_PATTERN, ref) or len(ref) > 250:
        raise ConfigError(f"--ref {ref!r}: give a branch, tag, pull/N/head or commit")

    def moved(entry: BuildEntry | str | None) -> Any:
        return (entry.model_copy(update={"ref": ref})
                if isinstance(entry, BuildEntry) and entry.git is not None else entry)

    build = ([moved(entry) for entry in matrix.build] if isinstance(matrix.build, list)
             else moved(matrix.build))
    return matrix.model_copy(update={"build": build, "variants": [
        variant.model_copy(update={"build": moved(variant.build)})
        for variant in matrix.variants]})
