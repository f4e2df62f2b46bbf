"""Contributors' keys on a board: ``farm board key PATH`` makes a key pair (the private
key for ``farm share --sign``, its public half in PATH.pub), ``farm board trust PUB --name
NAME`` has a board know a public key by a name. A public key file is one line: the raw
32-byte ed25519 key in base64."""

from __future__ import annotations

import base64
import binascii
from pathlib import Path

from sqlalchemy import Engine, insert, select
from sqlalchemy.orm import Session

from farm.board.keys import PUBLIC_KEY_BYTES, fingerprint, new_key, public_bytes
from farm.errors import ConfigError
from farm.store.board import BoardKey

# Bytes of a public key file read at most (one line of base64 is 45).
_MOST = 1024
# What a board may call a contributor: shown on every page, so plain.
_NAME_CHARACTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
                             "._- ")


def make_key(path: Path) -> str:
    """Write a new private key to ``path`` and its public half to ``path``.pub; one line
    saying where, and the fingerprint boards will show."""
    public_path = path.with_name(path.name + ".pub")
    if public_path.exists():
        raise ConfigError(f"{public_path} exists already: give another PATH")
    raw = public_bytes(new_key(path))
    public_path.write_text(base64.b64encode(raw).decode("ascii") + "\n", encoding="ascii")
    return (f"wrote {path} (private: `farm share --sign {path}`) and {public_path} (public: "
            f"give it to a board's `farm board trust`); fingerprint {fingerprint(raw)}")


def read_public(path: Path) -> bytes:
    """The raw public key in a .pub file; a ConfigError naming the file otherwise."""
    raw = b""
    if path.is_file():  # not a FIFO that would never end, nor a device
        try:
            with path.open("rb") as file:
                raw = base64.b64decode(file.read(_MOST).strip(), validate=True)
        except (OSError, binascii.Error):
            raw = b""
    if len(raw) != PUBLIC_KEY_BYTES:
        raise ConfigError(f"{path}: not a public key file (one line, a 32-byte ed25519 key "
                          "in base64, as `farm board key` writes to PATH.pub)")
    return raw


def trust(engine: Engine, path: Path, name: str) -> str:
    """Have the board know the public key in ``path`` as ``name``."""
    if not name.strip() or len(name) > 100 or not set(name) <= _NAME_CHARACTERS:
        raise ConfigError(f"--name {name!r}: give 1-100 letters, digits, spaces, '.', '_' "
                          "or '-'")
    raw = read_public(path)
    found = fingerprint(raw)
    with Session(engine) as session, session.begin():
        known = session.execute(select(BoardKey.name, BoardKey.fingerprint).where(
            (BoardKey.name == name) | (BoardKey.fingerprint == found))).first()
        if known is not None:
            raise ConfigError(f"the board knows key {known.fingerprint} as {known.name!r} "
                              "already; give another name, or this key is known")
        session.execute(insert(BoardKey).values(name=name, fingerprint=found,
                                                public_key=raw.hex()))
    return f"the board knows key {found} as {name!r}"
