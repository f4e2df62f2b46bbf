"""Where a command's result goes (``farm.report.formats.write``): stdout, or the file ``-o``
names, written whole or not at all (every format: the same bytes either way)."""

from __future__ import annotations

import sys
from pathlib import Path

from farm.errors import ConfigError


def emit(data: str | bytes, output: Path | None, what: str = "") -> None:
    """``data`` on stdout, or in ``output`` (``write_file``): text as UTF-8, bytes as they
    are (a kept report's, ``farm.results.printed``, or a file format's)."""
    if output is not None:
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
    partial = output.with_name(f".{output.name}.partial")
    try:
        partial.write_bytes(data)
        partial.replace(output)
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise ConfigError(f"cannot write {output}: {error.strerror}; give -o a path in a "
                          "writable folder") from None
    print(f"wrote {what + ' to ' if what else ''}{output} ({_size(len(data))})",
          file=sys.stderr)


def _size(count: int) -> str:
    return f"{count} bytes" if count < 10_240 else f"{count // 1024} KiB"
