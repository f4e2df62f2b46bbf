"""The node's ccache as builds use it: where it is, the environment a build's compiles
reach it through, and what one build got from it (its hits and misses, from a file in the
build folder that the build's own code could replace)."""

from __future__ import annotations

import os
from pathlib import Path

from farm.errors import BuildFailed
from workers.job.runtime.server import child_env
from workers.job.runtime.untrusted_files import read_file
from workers.paths import NodePaths

# ccache's record of one build's compiles (CCACHE_STATSLOG), in its build folder: a line
# per compile (~20 bytes), so a few hundred kB for the largest build.
CCACHE_LOG = "ccache.stats"
CCACHE_LOG_BYTES = 16 << 20


def ccache_dir(paths: NodePaths) -> Path:
    """The node's ccache: ``CCACHE_DIR``, else in the node's cache dir."""
    return Path(os.environ.get("CCACHE_DIR", str(paths.cache_dir / "ccache")))


def build_env(paths: NodePaths, tree: Path, build: Path, trusted: bool) -> dict[str, str]:
    """The compile steps' whole environment: the allow-list llama-server gets (no farm
    setting, URL or token), and ccache keyed on paths relative to the tree, counting its
    hits in the build folder (``ccache_counts``). The operator's builds write the node's
    ccache; a job's commit only reads it (it is bound read-only too), so that no commit
    changes what another build compiles to."""
    env = {**child_env(None), "CCACHE_BASEDIR": str(tree), "CCACHE_NOHASHDIR": "1",
           "CCACHE_DIR": str(ccache_dir(paths)), "CCACHE_STATSLOG": str(build / CCACHE_LOG)}
    if not trusted:
        env |= {"CCACHE_READONLY": "1", "CCACHE_TEMPDIR": str(build / "ccache-tmp")}
    return env


def ccache_counts(build: Path) -> tuple[int, int]:
    """The hits and misses ccache logged for the compiles of one build folder (a file the
    build's code could replace: read as ``untrusted_files.read_file`` reads, at most
    CCACHE_LOG_BYTES; anything else there is BuildFailed)."""
    try:
        lines = read_file(build / CCACHE_LOG, CCACHE_LOG_BYTES, error=BuildFailed,
                          what=f"the build's {CCACHE_LOG}").decode(errors="replace").splitlines()
    except FileNotFoundError:
        return 0, 0
    hits = sum(line in ("direct_cache_hit", "preprocessed_cache_hit") for line in lines)
    return hits, lines.count("cache_miss")
