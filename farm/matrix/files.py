"""Names a matrix or a job gives for files, and the one way a node makes a path of them.

A job is data from anyone who may submit, so every name it gives for a file (a model's
``file``, a Hub shard, a file a flag names) is a ``RelativeFile``: a relative path that
cannot climb out of the folder it is joined to (no ``..``, no absolute path, no empty
component, no backslash, no control character, no component that reads as an option). A
Hub file may sit in a subfolder (``Q4_K_M/model-00001-of-00002.gguf``).

``under`` is the only place a node joins such a name onto one of its folders (models,
cache, builds, logs): it checks each name, resolves the path (symlinks included) and
proves it stays under the folder before anything is created or opened there.
``tests/unit/test_structure.py`` fails on any other module that joins a non-constant onto
a node folder.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Annotated

from pydantic import AfterValidator, Field

from farm.errors import ConfigError

# C0 controls and DEL: NUL makes open() raise, CR/LF would forge log lines.
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIX = "give a name relative to its folder, such as model.gguf or Q4_K_M/model.gguf"
CONTROL_PROBLEM = "holds a control character"
# Files of a folder a "did you mean" reads at most (a models dir of thousands stays quick).
_NEIGHBOURS = 2000


def file_problem(value: str) -> str | None:
    """Why ``value`` is not a relative file name; None if it is one."""
    if not value:
        return "is empty"
    if _CONTROL.search(value):
        return CONTROL_PROBLEM
    if "\\" in value:
        return "holds a backslash (components are separated by /)"
    if value.startswith("/"):
        return "is an absolute path"
    for part in value.split("/"):
        if part in ("", "."):
            return "has an empty or '.' component"
        if part == "..":
            return "climbs out of its folder with '..'"
        if part.startswith("-"):
            return f"has a component starting with '-' ({part!r} would read as an option)"
    return None


def _relative(value: str) -> str:
    problem = file_problem(value)
    if problem is not None:
        raise ValueError(f"{value!r} {problem}: {_FIX}")
    return value


# A file name inside a folder a node owns (the models dir, a download's folder).
RelativeFile = Annotated[str, Field(min_length=1, max_length=500), AfterValidator(_relative)]


def relative_file(value: str, where: str) -> str:
    """``value`` if it is a ``RelativeFile``; ConfigError naming ``where`` and the fix."""
    problem = file_problem(value)
    if problem is not None:
        raise ConfigError(f"{where} {value!r} {problem}: {_FIX}")
    return value


def inside(path: Path, root: Path) -> bool:
    """Whether ``path``, resolved (symlinks included), lies under ``root`` resolved."""
    return path.resolve().is_relative_to(root.resolve())


def under(root: Path, *names: str, what: str = "file") -> Path:
    """``root / names...`` resolved, each name a ``RelativeFile`` and the result proven
    to stay under ``root`` (a symlink on the way may not lead out); ConfigError naming
    ``what`` otherwise. Nothing is created or opened."""
    for name in names:
        relative_file(name, what)
    path = root.joinpath(*names).resolve()
    if not path.is_relative_to(root.resolve()):
        raise ConfigError(f"{what} {'/'.join(names)!r} leads out of {root} (to {path}, "
                          "through a symlink): a node reads and writes a job's files only "
                          f"inside it; remove the link or give a name inside {root}")
    return path


def near_names(folder: Path, name: str) -> list[str]:
    """The files of ``folder`` whose names are nearest ``name`` (a typo's likely fix), at
    most three, nearest first; none where the folder cannot be read."""
    try:
        names = sorted(entry.name for _, entry in zip(range(_NEIGHBOURS), folder.iterdir(),
                                                      strict=False) if entry.is_file())
    except OSError:
        return []
    return difflib.get_close_matches(name, names, n=3, cutoff=0.75)
