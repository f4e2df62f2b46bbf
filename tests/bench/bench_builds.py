"""Source build benchmark (a script, not a test): cold build, ccache-warm rebuild, reuse.

Makes a git repository from the provisioned sdist's llama.cpp tree (commit A) with a second
commit B that changes one log line of tools/server/server.cpp, then builds with the farm's
machinery (``workers.setup.ondemand.make_source_build``, target llama-server, static):

1. A in a fresh cache dir with an empty ccache (the cold build; skipped with --warm),
2. B in the same tree (what a second commit of one source costs),
3. A again in another fresh cache dir (a new tree, every object from ccache),

printing each step's wall time and ccache's counters for that step (its stats log). It
asserts nothing about speed. Several minutes to an hour on two cores (the cold build).

    .venv/bin/python tests/bench/bench_builds.py [--work DIR] [--warm]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from farm.matrix.spec import BuildSource
from farm.settings import load_settings
from workers.paths import NodePaths
from workers.setup.manifests import load_manifest
from workers.setup.ondemand import make_source_build
from workers.setup.provision import provision

LINE_A = 'SRV_INF("%s", "initializing ...\\n");'
LINE_B = 'SRV_INF("%s", "initializing (commit B) ...\\n");'


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=b", "-c", "user.email=b@b",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def _repository(tree: Path, root: Path) -> tuple[Path, str, str]:
    repo = root / "llama.cpp"
    shutil.copytree(tree, repo, ignore=shutil.ignore_patterns("build-specfarm-*"))
    _git(repo, "init", "-q", "-b", "master")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "A")
    first = _git(repo, "rev-parse", "HEAD")
    server = repo / "tools/server/server.cpp"
    server.write_text(server.read_text().replace(LINE_A, LINE_B))
    _git(repo, "commit", "-qam", "B")
    return repo, first, _git(repo, "rev-parse", "HEAD")


def _counters(log: Path) -> str:
    shown = subprocess.run(["ccache", "--show-log-stats", "-v"], capture_output=True, text=True,
                           check=True, env={**os.environ, "CCACHE_STATSLOG": str(log)}).stdout
    found = {name: re.search(rf"^\s*{name}:\s+(\d+)", shown, re.MULTILINE)
             for name in ("Hits", "Direct", "Preprocessed", "Misses")}
    return ", ".join(f"{name.lower()} {match[1] if match else 0}" for name, match in found.items())


def _step(label: str, source: BuildSource, paths: NodePaths, work: Path) -> None:
    log = work / f"{label}.ccache"
    os.environ["CCACHE_STATSLOG"] = str(log)
    started = time.monotonic()
    made = make_source_build(source, paths, [], None)
    seconds = time.monotonic() - started
    size = Path(made.manifest.server).stat().st_size / 1e6
    print(f"{label:34} {seconds:7.0f} s  ccache: {_counters(log)}  llama-server {size:.0f} MB",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, help="scratch dir (default: a temporary one)")
    parser.add_argument("--warm", action="store_true",
                        help="keep the node's ccache (no cold build): steps 2 and 3 only")
    args = parser.parse_args()
    node = NodePaths.of(load_settings())
    provision(node)
    manifest = load_manifest("cpu", node)
    assert manifest is not None
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-builds-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ["CCACHE_DIR"] = str(node.cache_dir / "ccache") if args.warm \
        else str(work / "ccache")
    repo, first, second = _repository(Path(manifest.configure[2]), work)
    paths = replace(node, cache_dir=work / "cache")

    def source(commit: str) -> BuildSource:
        return BuildSource(git=str(repo), ref="master", commit=commit)

    print(f"{os.cpu_count()} CPUs, ccache in {os.environ['CCACHE_DIR']}")
    if not args.warm:
        _step("1. A, cold (empty ccache)", source(first), paths, work)
    else:
        _step("1. A, new tree, warm ccache", source(first), paths, work)
    _step("2. B, same tree (one file changed)", source(second), paths, work)
    _step("3. A, another new tree", source(first), replace(node, cache_dir=work / "cache2"),
          work)


if __name__ == "__main__":
    main()
