"""Where builds, downloads and models live on a node (outside any repository), and how
they are fingerprinted. Every path under a node folder that a name from a job, a matrix
or a build makes is made by ``farm.matrix.files.under``: resolved and proven to stay there."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from farm.errors import ConfigError
from farm.matrix.files import under
from farm.matrix.spec import ModelRef, RemoteFile
from farm.settings import SandboxMode, Settings


@dataclass(frozen=True)
class NodePaths:
    """This node's folders, from the one ``Settings`` object (``FARM_CACHE_DIR``,
    ``FARM_MODELS_DIR``, ``FARM_DOWNLOADS_DIR``, ``FARM_DATA_DIR``); passed down to whatever
    builds, fetches, inspects or logs."""

    cache_dir: Path  # builds, sources, downloads, model hashes
    models_dir: Path
    downloads_dir: Path  # Hub and URL models (``hub_file``, ``url_file``)
    logs_dir: Path  # one llama-server log per block
    # Whether a commit's builds and servers run in the sandbox (workers.job.runtime.sandbox):
    # the operator's choice for the node, beside its folders since everything that builds,
    # probes or starts a server is handed these.
    sandbox: SandboxMode = "on"

    @classmethod
    def of(cls, settings: Settings) -> NodePaths:
        """The node's folders and sandbox as the settings name them."""
        return cls(cache_dir=settings.cache_dir, models_dir=settings.models_dir,
                   downloads_dir=settings.downloads_dir, logs_dir=settings.logs_dir,
                   sandbox=settings.sandbox)

    @property
    def builds_dir(self) -> Path:
        """Where ``farm build`` keeps its builds, one folder per name."""
        return self.cache_dir / "builds"

    def server_binary(self, build_name: str) -> Path:
        """Where a named build keeps its ``llama-server``."""
        return under(self.builds_dir, build_name, "bin", "llama-server", what="build")


# Downloaded models, inside the downloads dir (the models dir unless a node sets
# FARM_DOWNLOADS_DIR or a worker config's `downloads-dir`; docs/models.md): a Hub file at
# hub/OWNER--NAME/COMMIT/FILE (a split GGUF's shards side by side, as llama-server wants
# them), a URL's at url/SHA256/FILE; each appears there only whole and with its sha256
# checked, so a file at its place is a file that may be used.
HUB_DIR, URL_DIR = "hub", "url"


def hub_file(downloads_dir: Path, repo: str, commit: str, file: str) -> Path:
    """Where a Hub repository's file at a commit lives on this node."""
    return under(downloads_dir, HUB_DIR, repo.replace("/", "--"), commit, file,
                 what=f"file of {repo}")


def url_file(downloads_dir: Path, sha256: str, file: str) -> Path:
    """Where a URL model's file (by its sha256) lives on this node."""
    return under(downloads_dir, URL_DIR, sha256, file, what="file of a URL model")


def downloaded_files(model: ModelRef, downloads_dir: Path) -> list[tuple[RemoteFile, Path]]:
    """Each file of a pinned remote model and its place in the downloads dir; ConfigError for
    a model not pinned (a stored job always is: `farm submit` / `farm run` pin it)."""
    if not model.pinned:
        raise ConfigError(f"model {model.name!r} ({model.source}) is not pinned to a commit "
                          "and its files' sha256; `farm submit` / `farm run` pin it")
    if model.hf is not None:
        return [(item, hub_file(downloads_dir, model.hf, model.revision or "", item.name))
                for item in model.files]
    return [(item, url_file(downloads_dir, item.sha256, item.name)) for item in model.files]


@dataclass(frozen=True)
class ModelFile:
    """A GGUF file on this node: what names it (a models dir's file name; a Hub model's
    repository, commit and file; a URL model's sha256 and file) and its size in bytes."""

    name: str
    size: int


def models_here(paths: NodePaths) -> tuple[list[ModelFile], list[ModelFile]]:
    """The GGUF files of the models dir a matrix's ``file:`` names (not the downloads kept
    in it), then the Hub and URL models' files downloaded here; each sorted by name."""
    downloads = [paths.downloads_dir / HUB_DIR, paths.downloads_dir / URL_DIR]
    own = [ModelFile(str(path.relative_to(paths.models_dir)), path.stat().st_size)
           for path in gguf_files(paths.models_dir)
           if not any(path.is_relative_to(folder) for folder in downloads)]
    fetched = [ModelFile(_downloaded_name(path.relative_to(paths.downloads_dir)),
                         path.stat().st_size)
               for folder in downloads for path in gguf_files(folder)]
    return sorted(own, key=lambda found: found.name), sorted(fetched, key=lambda f: f.name)


def gguf_files(folder: Path) -> list[Path]:
    """The GGUF files under ``folder`` (none where it is no folder)."""
    return [path for path in folder.rglob("*.gguf") if path.is_file()] if folder.is_dir() \
        else []


def _downloaded_name(relative: Path) -> str:
    """``hf OWNER/NAME FILE (commit 0123456789ab)`` for a Hub file at
    hub/OWNER--NAME/COMMIT/FILE, ``url FILE (sha256 0123456789ab)`` for a URL model's."""
    if len(relative.parts) < 3:
        return str(relative)
    kind, key, version, *file = relative.parts
    if kind == HUB_DIR:
        return f"hf {key.replace('--', '/', 1)} {'/'.join(file)} (commit {version[:12]})"
    return f"url {'/'.join([version, *file])} (sha256 {key[:12]})"


def file_sha256(path: Path) -> str:
    """The sha256 of a file, read in chunks (models are many GB)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(4 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@contextlib.contextmanager
def written_whole(target: Path) -> Iterator[Path]:
    """A temporary file of this process's own beside ``target``, to write in the block;
    renamed onto ``target`` (mode 0644) when the block ends without an error, else removed.
    A reader never sees part of the file, and two processes writing it at once (two
    provisions of one node) each rename a whole one."""
    target.parent.mkdir(parents=True, exist_ok=True)
    descriptor, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".partial",
                                        dir=target.parent)
    os.close(descriptor)
    temporary = Path(name)
    try:
        yield temporary
        temporary.chmod(0o644)  # mkstemp creates 0600
        os.replace(temporary, target)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()
