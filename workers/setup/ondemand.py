"""Builds a job names by source, made on the node that runs it (``farm run``, a worker).

A source build (``farm.matrix.spec.BuildSource``: git, the commit resolved at submit,
backend, cmake options) is kept under its local name (``src-COMMIT-IDENTITY``) in the
node's builds dir and made by ``workers.setup.builds.build``. One build at a time per
node: an exclusive ``fcntl`` lock in the cache dir, which every worker process on the host
shares, so N workers asking for one build make it once (the others wait, then find it).
Measurements hold the same lock shared, so that no build runs beside a measurement on the
node; a waiting build goes first (the ``intent`` lock), so that back-to-back jobs cannot
starve it, and a job's build goes first between a measurement's blocks (``measuring``).
"""

from __future__ import annotations

import fcntl
import shutil
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from farm.errors import BuildUnavailable
from farm.matrix.cuda_arch import CudaArch, cuda_arch_problem
from farm.matrix.files import under
from farm.matrix.spec import SOURCE_BUILD_PREFIX, BuildSource, JobSpec
from workers.job.admission import check_allowed
from workers.job.resolve import NodeFiles
from workers.job.telemetry import GpuInfo
from workers.paths import NodePaths
from workers.setup.builds import BuildRequest, all_manifests, build
from workers.setup.manifests import BuildManifest, load_manifest

LAST_USED = "last-used"


@contextmanager
def _flock(path: Path, mode: int) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        fcntl.flock(handle, mode)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def building(paths: NodePaths, *, for_job: bool = False) -> Iterator[None]:
    """Hold the node's build lock: no other build, and no measurement, runs meanwhile.

    A job's source build (``for_job``: a new build, which nothing measured uses) may go
    first between a measurement's blocks (``measuring``); any other build (`farm build`,
    which may replace a build a job is measuring, and pruning) waits for whole
    measurements: it also takes the ``replace`` lock, which each measurement holds shared
    from its start to its end."""
    locks = paths.cache_dir / "locks"
    kind = locks / ("build.job" if for_job else "build.replace")
    with (_flock(locks / "build.intent", fcntl.LOCK_EX), _flock(kind, fcntl.LOCK_EX),
          _flock(locks / "build.lock", fcntl.LOCK_EX)):
        yield


@contextmanager
def measuring(paths: NodePaths) -> Iterator[Callable[[], float]]:
    """Hold the node's build lock shared while measuring: measurements run side by side
    (one per GPU), a build waits for them, and a waiting build goes before new ones (the
    ``intent`` lock).

    What it gives, called between blocks, lets a waiting job's source build go first: the
    measurement lets go of the build lock, waits while the build runs (the ``job`` lock)
    and takes the lock again, and it returns the seconds that took (0: none waited). So a
    job's build waits for the block each measurement is in, not for whole jobs of hours,
    and the node's other GPUs idle that long. Other builds wait for the whole measurement
    (``building``)."""
    locks = paths.cache_dir / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    job_build = locks / "build.job"
    # Closing the files lets go of their locks.
    with (locks / "build.replace").open("a") as replace, (locks / "build.lock").open("a") as lock:
        with _flock(locks / "build.intent", fcntl.LOCK_SH):
            fcntl.flock(replace, fcntl.LOCK_SH)
            fcntl.flock(lock, fcntl.LOCK_SH)

        def let_builds_go() -> float:
            if not _held(job_build):
                return 0.0
            started = time.monotonic()
            fcntl.flock(lock, fcntl.LOCK_UN)
            with _flock(job_build, fcntl.LOCK_SH):  # once the build is made
                fcntl.flock(lock, fcntl.LOCK_SH)
            return time.monotonic() - started

        yield let_builds_go


def _held(path: Path) -> bool:
    """Whether a process holds this lock file exclusively."""
    with path.open("a") as probe:
        try:
            fcntl.flock(probe, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(probe, fcntl.LOCK_UN)
        return False


def cuda_arch(source: BuildSource, gpus: Sequence[GpuInfo]) -> CudaArch | None:
    """The CUDA architectures to build: the matrix's, else the worker's GPUs' compute
    capabilities (8.6 -> 86); None for other backends."""
    if source.backend != "cuda":
        return None
    if source.cuda_arch is not None:
        return source.cuda_arch
    found = sorted({gpu.compute_capability.replace(".", "") for gpu in gpus
                    if gpu.compute_capability})
    if not found:
        raise BuildUnavailable("a CUDA build needs its architecture: NVML reports no GPU "
                               "compute capability on this node; set `cuda-arch` in the "
                               "matrix's build")
    joined = ";".join(found)
    why = cuda_arch_problem(joined)
    if why is not None:
        raise BuildUnavailable(f"a CUDA build needs its architecture: NVML's compute "
                               f"capabilities on this node, as a list, {why}; set `cuda-arch` "
                               "in the matrix's build")
    return CudaArch(joined)


def source_request(source: BuildSource, gpus: Sequence[GpuInfo]) -> BuildRequest:
    """What ``farm build`` is asked for a source build on this node (its GPUs' arch)."""
    arch = cuda_arch(source, gpus)
    name = source.local_name + (f"-sm{arch.replace(';', '-')}"
                                if arch and source.cuda_arch is None else "")
    return BuildRequest(name=name, source=source.git, ref=source.commit,
                        backend=source.backend, cuda_architectures=arch,
                        cmake_args=source.cmake, targets=("llama-server",), trusted=False)


@dataclass(frozen=True)
class MadeBuild:
    """A source build ready on this node, and the seconds this call spent making it
    (0 when it was there already, waiting for the lock included otherwise)."""

    manifest: BuildManifest
    seconds: float


def _touch(manifest: BuildManifest, paths: NodePaths) -> None:
    under(paths.builds_dir, manifest.name, LAST_USED, what="build").touch()


def _ready(name: str, paths: NodePaths) -> BuildManifest | None:
    manifest = load_manifest(name, paths)
    return manifest if manifest and Path(manifest.server).is_file() else None


def make_source_build(source: BuildSource, paths: NodePaths, gpus: Sequence[GpuInfo],
                      allowed: Sequence[str] | None) -> MadeBuild:
    """The source build, made here under the node's build lock unless it already is."""
    check_allowed(source, allowed)
    request = source_request(source, gpus)
    found = _ready(request.name, paths)
    started = time.monotonic()
    if found is None:
        with building(paths, for_job=True):
            found = _ready(request.name, paths) or build(request, paths)
    _touch(found, paths)
    return MadeBuild(found, 0.0 if time.monotonic() - started < 0.5
                     else time.monotonic() - started)


def with_source_builds(spec: JobSpec, node: NodeFiles, paths: NodePaths,
                       gpus: Sequence[GpuInfo], allowed: Sequence[str] | None,
                       ) -> tuple[NodeFiles, float]:
    """``node`` with the job's source builds made here and added under their local names
    (``workers.job.resolve`` finds them there), and the seconds spent making them."""
    made: dict[str, Path] = {}
    seconds = 0.0
    for arm in (spec.baseline, spec.variant):
        source = arm.build.source
        if source is None or source.local_name in made:
            continue
        result = make_source_build(source, paths, gpus, allowed)
        made[source.local_name] = Path(result.manifest.server)
        seconds += result.seconds
    if not made:
        return node, 0.0
    builds: Mapping[str, Path] = {**node.builds, **made}
    return replace(node, builds=builds), seconds


@dataclass(frozen=True)
class SourceBuild:
    """A source build on this node, for ``farm builds``: what it is, its size, last use."""

    manifest: BuildManifest
    size: int  # bytes of its own binaries
    last_used: float  # epoch seconds


def source_builds(paths: NodePaths) -> list[SourceBuild]:
    """Every source build made on this node, most recently used first."""
    found = []
    for manifest in all_manifests(paths):
        if not manifest.name.startswith(SOURCE_BUILD_PREFIX):
            continue
        home = under(paths.builds_dir, manifest.name, what="build")
        size = sum(f.stat().st_size for f in (home / "bin").glob("*") if f.is_file())
        stamp = home / LAST_USED
        used = (stamp if stamp.exists() else home / "build.json").stat().st_mtime
        found.append(SourceBuild(manifest, size, used))
    return sorted(found, key=lambda item: -item.last_used)


def prune(paths: NodePaths, days: float) -> list[SourceBuild]:
    """Remove the source builds unused for ``days`` (under the build lock); returns them."""
    cutoff = time.time() - days * 86400
    removed = []
    with building(paths):
        for item in source_builds(paths):
            if item.last_used < cutoff:
                shutil.rmtree(under(paths.builds_dir, item.manifest.name, what="build"))
                removed.append(item)
    return removed
