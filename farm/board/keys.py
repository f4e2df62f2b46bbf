"""A contributor's ed25519 key: make it, load it, sign a bundle's manifest, check a signature.

A board knows contributors by the fingerprint of their public key (``fingerprint``), and
shows which bundles are signed by a key it knows. The private key is a PEM file that only
its owner may read: the farm writes it with mode 0600 and refuses to load one that others
can read, as ssh does.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import (
    Ed25519PrivateKey,
    Ed25519PublicKey,
)

from farm.errors import ConfigError

# Bytes of a raw ed25519 public key and of a signature.
PUBLIC_KEY_BYTES = 32
SIGNATURE_BYTES = 64
# Hex digits of a fingerprint: 64 bits, enough to tell a board's contributors apart.
FINGERPRINT_DIGITS = 16


def new_key(path: Path) -> Ed25519PrivateKey:
    """Make a key and write it to ``path`` (PEM, mode 0600); a ConfigError if the file
    exists, so that a key already handed out is never lost."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise ConfigError(f"{path} exists already: the farm never overwrites a key; give "
                          "another file, or delete this one if no bundle was signed with it"
                          ) from None
    with os.fdopen(descriptor, "wb") as file:
        os.fchmod(file.fileno(), 0o600)  # whatever the umask made of it
        file.write(pem)
        file.flush()
        os.fsync(file.fileno())
    return key


def load_private(path: Path) -> Ed25519PrivateKey:
    """The ed25519 key in the PEM file ``path``; a ConfigError naming the file when it is
    missing, readable by others, or not an unencrypted ed25519 key."""
    try:
        mode = path.stat().st_mode
        pem = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the signing key ({exc.strerror}); give "
                          "the private key file `farm board key PATH` made") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ConfigError(f"{path}: the signing key can be read by other users; "
                          f"`chmod 600 {path}` and try again")
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise ConfigError(f"{path}: not an unencrypted PEM private key; give the private "
                          "key file `farm board key PATH` made (not its .pub)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ConfigError(f"{path}: a {type(key).__name__.removeprefix('_')} key, not an "
                          "ed25519 one; bundles are signed with ed25519 keys only")
    return key


def public_bytes(private: Ed25519PrivateKey) -> bytes:
    """The raw 32-byte public key of ``private``: what a bundle's signature carries."""
    return private.public_key().public_bytes(serialization.Encoding.Raw,
                                             serialization.PublicFormat.Raw)


def fingerprint(public_raw: bytes) -> str:
    """A public key's short name on a board: its sha256 in hex, first 16 digits."""
    return hashlib.sha256(public_raw).hexdigest()[:FINGERPRINT_DIGITS]


def sign(private: Ed25519PrivateKey, data: bytes) -> bytes:
    """The 64-byte ed25519 signature of ``data``."""
    return private.sign(data)


def verify(public_raw: bytes, signature: bytes, data: bytes) -> bool:
    """Whether ``signature`` is ``public_raw``'s over ``data``; False for a key or
    signature of the wrong length as well."""
    if len(public_raw) != PUBLIC_KEY_BYTES or len(signature) != SIGNATURE_BYTES:
        return False
    try:
        Ed25519PublicKey.from_public_bytes(public_raw).verify(signature, data)
    except (InvalidSignature, ValueError):
        return False
    return True
