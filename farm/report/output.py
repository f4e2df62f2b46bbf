"""Where a command's result goes (``farm.report.formats.write``): stdout, or the file ``-o``
names, written whole or not at all (every format: the same bytes either way); a format of
many files (``Folder``: the board's site) into the folder ``-o`` names, each file whole."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError


@dataclass(frozen=True)
class Folder:
    """A rendering of many files: each file's bytes by its path inside the folder, and what
    they are in words ("index.html, 2 model pages")."""

    files: Mapping[str, bytes]
    what: str


def emit(data: str | bytes | Folder, output: Path | None, what: str = "") -> None:
    """``data`` on stdout, or in ``output`` (``write_file``): text as UTF-8, bytes as they
    are (a kept report's, ``farm.results.printed``, or a file format's); a ``Folder``'s
    files in the folder ``output`` (``write_folder``)."""
    if isinstance(data, Folder):
        assert output is not None, "a folder's format is file_only: -o is checked first"
        write_folder(output, data)
    elif output is not None:
        write_file(output, data.encode("utf-8") if isinstance(data, str) else data, what)
    elif isinstance(data, str):
        sys.stdout.write(data)
    else:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()


def write_file(output: Path, data: bytes, what: str = "") -> None:
    """``data`` in ``output``, whole or not at all; then "wrote [WHAT to] FILE (SIZE)" on
    stderr (stdout stays the result's)."""
    _whole(output, data)
    print(f"wrote {what + ' to ' if what else ''}{output} ({_size(len(data))})",
          file=sys.stderr)


def _size(count: int) -> str:
    return f"{count} bytes" if count < 10_240 else f"{count // 1024} KiB"


def write_folder(output: Path, folder: Folder) -> None:
    """``folder``'s files in ``output`` (made if new), each whole: the files it names are
    replaced and nothing else in ``output`` is touched; then "wrote N files to DIR (WHAT,
    SIZE)" on stderr."""
    for name, data in folder.files.items():
        path = output / name
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise ConfigError(f"cannot write {path}: {error.strerror}; give -o a writable "
                              "folder") from None
        _whole(path, data)
    count = len(folder.files)
    print(f"wrote {count} file{'' if count == 1 else 's'} to {output} ({folder.what}; "
          f"{_size(sum(len(data) for data in folder.files.values()))})", file=sys.stderr)


def _whole(output: Path, data: bytes) -> None:
    """``data`` in ``output``, whole or not at all."""
    partial = output.with_name(f".{output.name}.partial")
    try:
        partial.write_bytes(data)
        partial.replace(output)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {output}: {error.strerror}; give -o a path in a "
                          "writable folder") from None
