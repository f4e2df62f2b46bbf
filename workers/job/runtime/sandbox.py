"""Where a commit's code runs: every process of a build (configure, compile, link) and of
its binaries (the ``--version``/``--help`` probes, ``llama-server``) in a bubblewrap
sandbox (docs/security.md).

Inside: no network (a namespace with only loopback: the server answers on a UNIX socket
in a folder bound in), a cleared environment (the allow-list of ``child_env``, with
``HOME`` and ``TMPDIR`` on a private ``/tmp``), the system read-only (``/usr`` and the
dynamic linker's files of ``/etc``), the folders a caller names bound read-only or
writable, GPU device nodes only for a job that uses a GPU, no capabilities, its own
process, IPC, UTS and cgroup namespaces, no user namespace of its own
(``--disable-userns``), a seccomp filter refusing what a build or server never needs
(``workers.job.runtime.seccomp``), a private ``/tmp`` of bounded size, the pids and memory
bounds of a delegated cgroup where the node has one (``workers.job.runtime.bounds``), a new
session, killed with the worker (``--die-with-parent``). Not inside: the worker's home,
config, data, cache and model folders (except what is bound), its database URL, broker
password, Hub token.

An operator may turn it off per node (``FARM_SANDBOX=off``, ``sandbox: off`` in a worker
config), never a job; every run records which. Where bubblewrap cannot run (macOS, a
kernel or unit without user namespaces), a node with the sandbox on runs its operator's
own builds as they are and builds no job's commit, and says so.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from farm.errors import BuildUnavailable
from farm.settings import SandboxMode
from workers.job.runtime import confine, seccomp
from workers.job.runtime.bounds import SandboxBounds, find_cgroups, node_bounds, size_text

BWRAP = "bwrap"
# The system a build or server needs, read-only: programs, libraries, compilers, CUDA
# (/usr/local/cuda), and the dynamic linker's cache and the compiler's alternatives.
_SYSTEM = (Path("/usr"), Path("/etc/ld.so.cache"), Path("/etc/ld.so.conf"),
           Path("/etc/ld.so.conf.d"), Path("/etc/alternatives"))
_TOP_LINKS = (Path("/bin"), Path("/sbin"), Path("/lib"), Path("/lib32"), Path("/lib64"))
# GPU device nodes, bound only for a job on a GPU; /proc is the sandbox's own, and NVML
# reads the driver's files there (/proc/driver/nvidia comes with a fresh procfs).
_GPU_DEVICES = ("nvidia*", "nvidia-caps", "dri", "kfd")
# Inside the sandbox: the private /tmp is also its home.
INSIDE_HOME = "/tmp"


def _system_binds() -> list[str]:
    """The read-only system, merged-/usr links as links (``/lib -> usr/lib``)."""
    args: list[str] = []
    for path in _SYSTEM:
        if path.exists():
            args += ["--ro-bind", str(path), str(path)]
    for link in _TOP_LINKS:
        if link.is_symlink():
            args += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            args += ["--ro-bind", str(link), str(link)]
    return args


def _gpu_binds() -> list[str]:
    args: list[str] = []
    for pattern in _GPU_DEVICES:
        for device in sorted(Path("/dev").glob(pattern)):
            args += ["--dev-bind", str(device), str(device)]
    return args


def _binds(option: str, paths: Iterable[Path]) -> list[str]:
    return _binds_at(option, ((path, str(path)) for path in paths))


def _binds_at(option: str, pairs: Iterable[tuple[Path, str]]) -> list[str]:
    """``option`` for each ``(outside, inside)`` folder."""
    args: list[str] = []
    for outside, inside in pairs:
        args += [option, str(outside), inside]
    return args


@dataclass(frozen=True)
class Sandbox:
    """How this node runs a commit's code: in bubblewrap (``on``) or as the worker (``off``)."""

    mode: SandboxMode = "on"
    # None: this node's (FARM_SANDBOX_*), read when a sandbox is first asked for, not when
    # one is made (a module's default sandbox is made at import).
    bounds: SandboxBounds | None = None

    @property
    def limits(self) -> SandboxBounds:
        """The bounds of every sandboxed process: ``bounds`` or this node's."""
        return self.bounds if self.bounds is not None else node_bounds()

    @property
    def on(self) -> bool:
        """Whether a commit's processes run sandboxed."""
        return self.mode == "on"

    def describe(self) -> str:
        """The walls and bounds of a sandboxed process here, in words: where no usable
        cgroup bounds its pids and memory, why."""
        limits = self.limits
        cgroups = find_cgroups(limits.cgroup)
        bounded = f"no pids or memory bound: {cgroups}" if isinstance(cgroups, str) else \
            f"each process tree bounded to {cgroups.describe(limits)}"
        return (f"bubblewrap: no network, no secrets, writes only to its build folder; a "
                f"seccomp filter, no nested user namespaces, a {size_text(limits.tmp)} "
                f"/tmp; {bounded}")

    def wraps(self, trusted: bool) -> bool:
        """Whether a process of a build runs in bubblewrap: always with the sandbox on and
        bubblewrap working here. Where it cannot run, the operator's own builds
        (``trusted``: `farm build`, `farm provision`, a worker's `builds:`) run as they are,
        and a job's commit runs nowhere: BuildUnavailable naming why."""
        if not self.on:
            return False
        # A FARM_SANDBOX_* bound it does not take fails here, before any sandboxed process.
        _ = self.limits
        reason = _unavailable()
        if reason is None:
            return True
        if trusted:
            return False
        raise BuildUnavailable(f"the sandbox cannot run on this node: {reason}; this node "
                               "builds and runs no job's commit unsandboxed unless its "
                               "operator sets FARM_SANDBOX=off (`sandbox: off` in a worker "
                               "config)")

    def command(self, argv: Sequence[str], env: Mapping[str, str], *, trusted: bool,
                read: Iterable[Path] = (), write: Iterable[Path] = (),
                placed: Iterable[tuple[Path, str]] = (), moved: Iterable[tuple[Path, str]] = (),
                gpu: bool = False) -> list[str]:
        """``argv`` as this node runs it (``wraps``): in bubblewrap with ``read`` bound
        read-only and ``write`` writable (each at its own path), ``placed`` folders
        read-only and ``moved`` folders writable at another path inside (``(outside,
        inside)``), bound in that order so that a writable folder may sit inside a
        read-only one, ``env`` as its whole environment and the GPU device nodes with
        ``gpu``; else as it is (``env`` is then passed to the process by the caller)."""
        if not self.wraps(trusted):
            return list(argv)
        environment: list[str] = []
        for name, value in {**env, "HOME": INSIDE_HOME, "TMPDIR": INSIDE_HOME}.items():
            environment += ["--setenv", name, value]
        limits = self.limits
        cgroups = find_cgroups(limits.cgroup)
        bounded = cgroups.launcher_args(limits) if not isinstance(cgroups, str) else []
        return [*_launcher(bounded), BWRAP, *_namespaces(), "--new-session", "--clearenv",
                *environment, *(_gpu_binds() if gpu else []),
                "--size", str(limits.tmp), "--tmpfs", INSIDE_HOME,
                *_binds("--ro-bind", read), *_binds("--bind", write),
                *_binds_at("--ro-bind", placed), *_binds_at("--bind", moved),
                "--chdir", "/", "--", *argv]


@lru_cache(maxsize=1)
def _unavailable() -> str | None:
    """Why bubblewrap cannot run here (not installed, no user or network namespaces), or
    None: asked once per process."""
    if shutil.which(BWRAP) is None:
        return ("bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap; "
                "Fedora: dnf install bubblewrap)")
    reason = seccomp.unavailable()
    if reason is not None:
        return reason
    try:
        argv = [*_launcher([]), BWRAP, *_namespaces(), "--", "/usr/bin/true"]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run: {exc}"
    if done.returncode != 0:
        detail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return (f"bubblewrap cannot make its namespaces here ({detail}); a kernel without "
                "user namespaces, a bubblewrap older than 0.8 (--disable-userns), or a "
                "systemd unit with RestrictNamespaces=yes forbids it")
    return None


def _launcher(bounded: list[str]) -> list[str]:
    """What starts bubblewrap: ``confine`` (its own file, the standard library only),
    handing it the seccomp filter and making the process tree's cgroups (``bounded``);
    started by this process, which it outlives by no more than bubblewrap does."""
    return [sys.executable, "-I", "-S", confine.__file__, "--parent", str(os.getpid()),
            "--filter", seccomp.refusing_filter().hex(), *bounded, "--"]


def _namespaces() -> list[str]:
    """The namespaces and system every sandbox has (what the availability check runs): no
    user namespace may be made inside (bubblewrap makes a nested one that cannot)."""
    return ["--unshare-all", "--unshare-user", "--disable-userns", "--assert-userns-disabled",
            "--die-with-parent", "--cap-drop", "ALL", *_system_binds(),
            "--proc", "/proc", "--dev", "/dev"]


def sandbox_status(sandbox: Sandbox) -> str:
    """One line for a worker's or `farm run`'s start: the sandbox and whether it runs."""
    if not sandbox.on:
        return ("sandbox: off (set by this node's operator): builds and servers of commits "
                "run with this worker's rights, network and environment")
    reason = _unavailable()
    if reason is not None:
        return (f"sandbox: on, but it cannot run here: {reason}; the operator's own builds "
                "run unsandboxed and no job's commit is built")
    return f"sandbox: on ({sandbox.describe()})"


def inner_pid(outer: int, binary: str) -> int:
    """The pid (in this namespace) of the process running ``binary`` under the sandbox
    process ``outer`` (bubblewrap forks its namespace's init, which forks the command), so
    that telemetry reads the server's own figures; ``outer`` where none is found yet."""
    frontier, seen = [outer], {outer}
    while frontier:
        pid = frontier.pop(0)
        for child in _children(pid):
            if child in seen:
                continue
            seen.add(child)
            try:
                if Path(os.readlink(f"/proc/{child}/exe")).name == Path(binary).name:
                    return child
            except OSError:
                pass
            frontier.append(child)
    return outer


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return found
    for task in tasks:
        try:
            text = Path(f"/proc/{pid}/task/{task}/children").read_text()
        except OSError:
            continue
        found += [int(item) for item in text.split()]
    return found
