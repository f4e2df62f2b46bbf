"""The sandbox's resource bounds (docs/security.md): the size of its private /tmp, and the
pids and memory bounds of each sandboxed process tree, set through a cgroup the node's
operator delegates to the worker (``FARM_SANDBOX_CGROUP``).

The worker makes one child cgroup per sandboxed process (``workers/job/runtime/confine.py``)
and removes it after. cgroup v2 (one folder, with the ``pids`` and ``memory``
controllers) is used where the delegated cgroup has them; else cgroup v1's ``pids`` and
``memory`` hierarchies, each where it is mounted. Where no usable cgroup is named, the
sandbox runs without those two bounds, and its description (the worker's start line) says
so.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path, PurePosixPath

from pydantic import ByteSize, Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from farm.errors import ConfigError

CONTROLLERS = ("pids", "memory")
GIB = 1 << 30


class SandboxBounds(BaseSettings):
    """The ``FARM_SANDBOX_*`` bounds of every sandboxed build step, probe and server."""

    model_config = SettingsConfigDict(env_prefix="FARM_SANDBOX_", env_ignore_empty=True,
                                      extra="ignore", frozen=True)

    # A build's compiler jobs (make -j N: a few processes each), a server's threads (the
    # pids controller counts threads) and a CUDA runtime's fit with room; a fork bomb does
    # not.
    pids: int = Field(2048, ge=16, le=1 << 22, description=(
        "Most processes and threads of one sandboxed build step or server (cgroup pids)."))
    memory: ByteSize | None = Field(None, ge=64 << 20, description=(
        "Most memory of one sandboxed build step or server (cgroup memory; its /tmp "
        "counts); default three quarters of this node's memory."))
    # The private /tmp is a tmpfs, in memory: compilers' temporary files (nvcc's for every
    # CUDA architecture are the largest) and nothing else a server needs.
    tmp: ByteSize = Field(ByteSize(4 * GIB), ge=1 << 20, description=(
        "Size of the sandbox's private /tmp (a tmpfs)."))
    cgroup: str | None = Field(None, pattern=r"^[^\x00-\x1f]+$", description=(
        "A cgroup delegated to the worker (written to by it), as /proc/self/cgroup names "
        "it: absolute (/specfarm) or relative to the worker's own cgroup (.. under "
        "systemd's DelegateSubgroup=). Unset: no pids or memory bound."))

    @property
    def memory_bytes(self) -> int:
        """``memory``, or three quarters of this node's physical memory."""
        if self.memory is not None:
            return int(self.memory)
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") * 3 // 4


def size_text(size: int) -> str:
    """A size in GiB, or in MiB below one GiB."""
    return f"{size / GIB:.1f} GiB" if size >= GIB else f"{size >> 20} MiB"


@lru_cache(maxsize=1)
def node_bounds() -> SandboxBounds:
    """This node's bounds from its environment, read once; a ConfigError naming the
    variable and what it takes."""
    try:
        return SandboxBounds()
    except ValidationError as exc:
        raise ConfigError("; ".join(
            f"FARM_SANDBOX_{'_'.join(map(str, error['loc'])).upper()}={error.get('input')!r}: "
            f"{error['msg'].lower()}" for error in exc.errors())) from exc


@dataclass(frozen=True)
class Cgroups:
    """Where each sandboxed process tree's cgroup is made: the delegated folder of each
    controller (the same folder for both under cgroup v2)."""

    version: int
    pids: Path | None
    memory: Path | None

    def launcher_args(self, bounds: SandboxBounds) -> list[str]:
        """The launcher's options that make and bound the process tree's cgroups."""
        args: list[str] = []
        if self.pids is not None:
            args += ["--cgroup", str(self.pids), "--pids", str(bounds.pids)]
        if self.memory is not None:
            if self.memory != self.pids:
                args += ["--cgroup", str(self.memory)]
            args += ["--memory", str(bounds.memory_bytes)]
        return args

    def describe(self, bounds: SandboxBounds) -> str:
        """What bounds each process tree, in words."""
        said = []
        if self.pids is not None:
            said.append(f"{bounds.pids} processes")
        if self.memory is not None:
            said.append(f"{size_text(bounds.memory_bytes)} of memory")
        where = sorted({str(self.pids), str(self.memory)} - {"None"})
        missing = [name for name in CONTROLLERS if getattr(self, name) is None]
        lacks = f"; no {' or '.join(missing)} bound (no such cgroup)" if missing else ""
        return f"{' and '.join(said)} (cgroup v{self.version}: {', '.join(where)}){lacks}"


@lru_cache(maxsize=4)
def find_cgroups(wanted: str | None) -> Cgroups | str:
    """The delegated cgroup ``wanted`` as folders this process may make cgroups in, or
    why there is none (one line): tried once per process, with a child made and removed
    in each folder."""
    if wanted is None:
        return ("FARM_SANDBOX_CGROUP is not set (a cgroup delegated to the worker: "
                "docs/security.md)")
    mounts, own = _mounts(), _own_cgroups()
    unified = mounts.get("cgroup2")
    if unified is not None and "" in own:
        folder = _folder(unified, own[""], wanted)
        if folder is not None and set(CONTROLLERS) <= _words(folder / "cgroup.controllers"):
            reason = _enable(folder) or _try_child(folder)
            return reason or Cgroups(2, folder, folder)
    found: dict[str, Path | None] = {}
    for name in CONTROLLERS:
        mount = mounts.get(name)
        folder = _folder(mount, own.get(name, "/"), wanted) if mount else None
        if folder is not None and folder.is_dir() and _try_child(folder) is None:
            found[name] = folder
    if not found:
        return (f"FARM_SANDBOX_CGROUP={wanted}: no cgroup there with the pids or memory "
                "controller that this worker may make cgroups in")
    return Cgroups(1, found.get("pids"), found.get("memory"))


def _mounts() -> dict[str, tuple[str, Path]]:
    """The cgroup mounts: ``cgroup2`` and each v1 controller -> (its root, mount point)."""
    found: dict[str, tuple[str, Path]] = {}
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        fields, _, tail = line.partition(" - ")
        words, rest = fields.split(), tail.split()
        if len(words) < 5 or len(rest) < 3:
            continue
        place = (words[3], Path(words[4]))
        if rest[0] == "cgroup2":
            found.setdefault("cgroup2", place)
        elif rest[0] == "cgroup":
            for option in rest[2].split(","):
                if option in CONTROLLERS:
                    found.setdefault(option, place)
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup in each hierarchy: ``""`` for v2, a controller's name for v1."""
    own: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else [""]:
            own[name] = path
    return own


def _folder(mount: tuple[str, Path], own: str, wanted: str) -> Path | None:
    """The folder of cgroup ``wanted`` (absolute, or relative to ``own``) in a hierarchy
    mounted from its ``root`` at ``point``; None where it lies outside the mount."""
    root, point = mount
    path = os.path.normpath(PurePosixPath(own) / wanted)
    if path.startswith("//"):
        path = path[1:]
    if path != root and not path.startswith(root.rstrip("/") + "/"):
        return None
    return point / path[len(root):].lstrip("/")


def _words(path: Path) -> set[str]:
    try:
        return set(path.read_text().split())
    except OSError:
        return set()


def _enable(folder: Path) -> str | None:
    """The pids and memory controllers for the cgroups made in ``folder`` (v2)."""
    if set(CONTROLLERS) <= _words(folder / "cgroup.subtree_control"):
        return None
    try:
        (folder / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
    except OSError as exc:
        return (f"cannot enable pids and memory in {folder} ({exc.strerror}): under cgroup "
                "v2 the delegated cgroup must hold no process itself (systemd: "
                "DelegateSubgroup=)")
    return None


def _try_child(folder: Path) -> str | None:
    probe = folder / f"specfarm-probe-{os.getpid()}"
    try:
        probe.mkdir()
        probe.rmdir()
    except OSError as exc:
        return f"cannot make a cgroup in {folder}: {exc.strerror}"
    return None
