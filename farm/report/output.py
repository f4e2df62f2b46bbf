"""Where a command's result goes (``farm.report.formats.write``): stdout, or the file ``-o``
names, written whole or not at all (every format: the same bytes either way)."""

from __future__ import annotations

import sys
from pathlib import Path

from farm.errors import ConfigError


def emit(text: str, output: Path | None, what: str = "") -> None:
    """``text`` on stdout, or in ``output`` (``write_file``)."""
    if not text.endswith("\n"):
        text += "\n"
    if output is None:
        sys.stdout.write(text)
        return
    write_file(output, text.encode("utf-8"), what)


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
