"""Where builds, downloads and models live on a node (outside any repository), and how
they are fingerprinted."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def cache_dir() -> Path:
    """Root of everything built or fetched: ``FARM_CACHE_DIR`` or ``~/.cache/specfarm``."""
    configured = os.environ.get("FARM_CACHE_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "specfarm"


def builds_dir() -> Path:
    return cache_dir() / "builds"


def models_dir() -> Path:
    return Path(os.environ.get("FARM_MODELS_DIR") or cache_dir() / "models").expanduser()


def server_binary(build_name: str) -> Path:
    """Where a named build keeps its ``llama-server``."""
    return builds_dir() / build_name / "bin" / "llama-server"


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks (models are many GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(4 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
