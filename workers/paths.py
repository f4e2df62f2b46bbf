"""Where builds, downloads and models live on a node (outside any repository), and how
they are fingerprinted."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from farm.settings import Settings


@dataclass(frozen=True)
class NodePaths:
    """This node's folders, from the one ``Settings`` object (``FARM_CACHE_DIR``,
    ``FARM_MODELS_DIR``, ``FARM_DATA_DIR``); passed down to whatever builds, fetches,
    inspects or logs."""

    cache_dir: Path  # builds, sources, downloads, model hashes
    models_dir: Path
    logs_dir: Path  # one llama-server log per block

    @classmethod
    def of(cls, settings: Settings) -> NodePaths:
        """The node's folders as the settings name them."""
        return cls(cache_dir=settings.cache_dir, models_dir=settings.models_dir,
                   logs_dir=settings.logs_dir)

    @property
    def builds_dir(self) -> Path:
        """Where ``farm build`` keeps its builds, one folder per name."""
        return self.cache_dir / "builds"

    def server_binary(self, build_name: str) -> Path:
        """Where a named build keeps its ``llama-server``."""
        return self.builds_dir / build_name / "bin" / "llama-server"


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks (models are many GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(4 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()
