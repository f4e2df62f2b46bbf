"""The machine id of a data dir: a random name that stands for the host in shared bundles.

Made once, the first time it is asked for, and kept in ``DATA_DIR/machine-id``: two bundles
from one data dir are one machine on a board, a copied data dir keeps its id, and nothing
in it says whose machine it is (no hostname, no hardware serial).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import tempfile
from pathlib import Path

from farm.errors import ConfigError

MACHINE_ID_FILE = "machine-id"
MACHINE_ID_PATTERN = r"^[0-9a-f]{32}$"
# More than a machine id with its newline: a larger file is not one, and is not read whole.
_MOST_BYTES = 64


def machine_id(data_dir: Path) -> str:
    """The data dir's machine id (32 lowercase hex digits), made on first use.

    Two processes asking at once get the same id: each writes its candidate to a file of its
    own and links it to ``machine-id``, which only one link can create.
    """
    path = data_dir / MACHINE_ID_FILE
    if path.exists():
        return _read(path)
    data_dir.mkdir(parents=True, exist_ok=True)
    descriptor, candidate = tempfile.mkstemp(dir=data_dir, prefix=f".{MACHINE_ID_FILE}.")
    try:
        with os.fdopen(descriptor, "w") as file:
            os.fchmod(file.fileno(), 0o644)
            file.write(secrets.token_hex(16) + "\n")
            file.flush()
            os.fsync(file.fileno())
        with contextlib.suppress(FileExistsError):  # another process made it first
            os.link(candidate, path)
    finally:
        os.unlink(candidate)
    return _read(path)


def existing_machine_id(data_dir: Path) -> str | None:
    """The data dir's machine id if it has one yet (a dry run makes none)."""
    path = data_dir / MACHINE_ID_FILE
    return _read(path) if path.exists() else None


def _read(path: Path) -> str:
    """The id in ``path``; a ConfigError naming the file and the fix when it holds anything
    else."""
    try:
        with path.open("rb") as file:
            content = file.read(_MOST_BYTES)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the machine id ({exc.strerror}); make the "
                          "data dir readable, or point FARM_DATA_DIR at another") from None
    text = content.decode("ascii", errors="replace").removesuffix("\n")
    if re.fullmatch(MACHINE_ID_PATTERN, text) is None:
        raise ConfigError(f"{path} holds {content[:40]!r}, not a machine id (32 lowercase hex "
                          "digits); delete the file and the farm makes a new one (bundles "
                          "shared before then will count as another machine)")
    return text
