"""A build's manifest (its build.json): what a finished build is, where it lies, read and
written.

The manifest records source, ref, commit (or the sdist's sha256), backend, the exact
configure command and what the binary says; writing it also copies the build's binaries
into its own folder, so that what it runs is its own whatever is built later.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict, dataclass, field
from pathlib import Path

from farm.errors import BuildFailed
from farm.matrix.files import under
from workers.job.runtime.untrusted_files import copy_file
from workers.paths import NodePaths
from workers.setup.steps import FILE_BYTES


@dataclass(frozen=True)
class BuildManifest:
    """A finished build as stored in its build.json: provenance, binary, capabilities."""

    name: str
    key: str
    source: str
    ref: str | None
    commit: str | None
    sdist_sha256: str | None
    backend: str
    configure: list[str]
    targets: list[str]
    server: str
    version: str
    build_number: int | None
    spec_types: list[str] = field(default_factory=list)
    cache_types: list[str] = field(default_factory=list)
    # The source tree on this node (``configure`` names it as the build saw it: in the
    # sandbox, builds.INSIDE_TREE); None in manifests written before it was kept.
    tree: str | None = None


def manifest_path(name: str, paths: NodePaths) -> Path:
    """Where the build called ``name`` keeps its manifest."""
    return under(paths.builds_dir, name, "build.json", what="build")


def load_manifest(name: str, paths: NodePaths) -> BuildManifest | None:
    """The manifest of the build ``name``, None if it is missing or unreadable."""
    try:
        return BuildManifest(**json.loads(manifest_path(name, paths).read_text()))
    except (OSError, ValueError, TypeError):
        return None


def write_manifest(manifest: BuildManifest, binaries: list[Path], paths: NodePaths) -> None:
    """The manifest, and (for a build the farm made) copies of its binaries in ``bin``:
    the build's own, whatever is built in its source tree later."""
    home = under(paths.builds_dir, manifest.name, what="build")
    home.mkdir(parents=True, exist_ok=True)
    link = home / "bin"
    if link.is_symlink():
        link.unlink()
    if binaries:
        partial = home / "bin.partial"
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        for binary in binaries:  # from a build folder: not through a link, bounded
            copy_file(binary, partial / binary.name, FILE_BYTES, error=BuildFailed,
                      what=f"the build's {binary.name}")
        shutil.rmtree(link, ignore_errors=True)
        partial.rename(link)
    else:
        shutil.rmtree(link, ignore_errors=True)
    target = manifest_path(manifest.name, paths)
    partial = target.with_suffix(".partial")
    partial.write_text(json.dumps(asdict(manifest), indent=2))
    partial.replace(target)
