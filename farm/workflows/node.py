"""This machine as a node: its places and the model files found there (``farm paths``), its
builds made, registered, listed and pruned (``farm build``, ``farm builds``), the
tutorial's build and models provisioned (``farm provision``), and whether a commit's code
would run in its sandbox (``farm run``'s note)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from farm.settings import Settings
from workers.paths import NodePaths
from workers.setup.builds import Backend as Backend  # a request's, for the CLI
from workers.setup.builds import BuildRequest as BuildRequest  # `farm build`'s, for the CLI

if TYPE_CHECKING:
    from workers.paths import ModelFile
    from workers.setup.manifests import BuildManifest
    from workers.setup.ondemand import SourceBuild
    from workers.setup.provision import Provisioned


@dataclass(frozen=True)
class ModelsHere:
    """Where this node keeps builds, models and downloads, and the model files in the
    models dir (a matrix's ``file:``) and downloaded (``hf:``, ``url:``), each by name."""

    builds_dir: Path
    models_dir: Path
    downloads_dir: Path
    own: list[ModelFile]
    fetched: list[ModelFile]


def models_here(settings: Settings) -> ModelsHere:
    """This node's places and the model files found in them."""
    from workers.paths import models_here as found_here

    node = NodePaths.of(settings)
    own, fetched = found_here(node)
    return ModelsHere(node.builds_dir, node.models_dir, node.downloads_dir, own, fetched)


def build_commands(request: BuildRequest) -> tuple[list[str], list[str]]:
    """The cmake configure and build command lines of ``request`` (``--dry-run``), on a
    source tree not fetched yet."""
    from workers.setup.builds import build_argv, configure_argv

    tree, out = Path("<source>"), Path("<source>/build-specfarm-KEY")
    return configure_argv(request, tree, out), build_argv(out, request.targets)


def make_build(settings: Settings, request: BuildRequest) -> BuildManifest:
    """``request`` built under the node's build lock (or found cached)."""
    from workers.setup.builds import build
    from workers.setup.ondemand import building

    paths = NodePaths.of(settings)
    with building(paths):
        return build(request, paths)


def register_build(settings: Settings, name: str, binary: Path) -> BuildManifest:
    """A llama-server built elsewhere registered as ``name``."""
    from workers.setup.builds import register_binary

    return register_binary(name, binary, NodePaths.of(settings))


def prune_builds(settings: Settings, days: float) -> list[SourceBuild]:
    """The source builds unused for ``days`` days, removed."""
    from workers.setup.ondemand import prune

    return prune(NodePaths.of(settings), days)


def node_builds(settings: Settings) -> tuple[list[BuildManifest], list[SourceBuild]]:
    """Every build manifest on this node by name, and the source builds made for jobs,
    most recently used first."""
    from workers.setup.builds import all_manifests
    from workers.setup.ondemand import source_builds

    paths = NodePaths.of(settings)
    return all_manifests(paths), source_builds(paths)


def provision_node(settings: Settings) -> Provisioned:
    """The CPU build and the test models on this node, each step skipped when done."""
    from workers.setup.provision import provision

    return provision(NodePaths.of(settings))


def sandbox_note(settings: Settings) -> str | None:
    """One line when a commit's code would not run in the sandbox here (it is off, or
    bubblewrap cannot run), else None."""
    from workers.job.runtime.sandbox import Sandbox, sandbox_status

    sandbox = Sandbox(settings.sandbox)
    if sandbox.on and sandbox.wraps(trusted=True):
        return None
    return f"note: {sandbox_status(sandbox)}"
