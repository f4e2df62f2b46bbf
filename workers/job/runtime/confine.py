"""What starts bubblewrap for the sandbox (workers/job/runtime/sandbox.py), run as a script
by path with the standard library only (``python -I -S confine.py OPTIONS -- bwrap ...``):
it hands bubblewrap the seccomp filter as a file descriptor, which the worker's own
``subprocess`` calls cannot pass, and, given delegated cgroups, makes one child cgroup per
process tree with its pids and memory bounds, starts bubblewrap in it, and when bubblewrap
exits kills whatever is left there and removes the cgroup.

A signal that ends it (SIGTERM, SIGINT, SIGHUP, the worker's death) ends bubblewrap first,
and it exits as bubblewrap did. It fails closed: a bound it cannot set is an exit 125 with
one line saying why (``CANNOT_CONFINE``), never a process tree run without it. Where the
kernel killed a process of the tree at its memory bound, its last line says so
(``OUT_OF_MEMORY``): the tree's own failure, not the node's. Killed itself with SIGKILL
(the worker stopping a server at once), it cannot remove its cgroup: the next launcher in
that folder does (``_sweep``).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

# Exit status when the sandbox could not be set up (as `env` and `timeout` use it), and
# the start of the one line that then says why.
NOT_CONFINED = 125
CANNOT_CONFINE = "sandbox: cannot start bubblewrap confined"
# The start of the last line when the kernel killed a process of the tree at its bound.
OUT_OF_MEMORY = "sandbox: out of memory at its bound"
PREFIX = "sandbox-"
_PR_SET_PDEATHSIG = 1


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="confine")
    parser.add_argument("--parent", type=int, required=True,
                        help="the pid of the process that starts this one (the worker)")
    parser.add_argument("--filter", help="the seccomp BPF program, in hex")
    parser.add_argument("--cgroup", action="append", default=[], type=Path,
                        help="a delegated cgroup folder to make this tree's cgroup in")
    parser.add_argument("--pids", type=int)
    parser.add_argument("--memory", type=int)
    return parser.parse_args(argv[:split]), argv[split + 1:]


def _sweep(folder: Path) -> None:
    """Remove cgroups left by launchers that were killed before they could: those of a pid
    that is gone, or is this one's (its cgroup is not made yet: another launcher had the
    pid before). A live launcher's stays, and a cgroup with a process in it cannot be
    removed."""
    for child in folder.glob(PREFIX + "*"):
        pid = child.name.removeprefix(PREFIX).partition("-")[0]
        if pid.isdigit() and (int(pid) == os.getpid() or not Path(f"/proc/{pid}").exists()):
            with contextlib.suppress(OSError):
                child.rmdir()


def _make(folder: Path, pids: int | None, memory: int | None) -> Path:
    """This tree's cgroup in ``folder`` with the bounds its controllers there take: named
    by this pid (``_sweep``) and a random part, which no stale cgroup holds."""
    _sweep(folder)
    leaf = folder / f"{PREFIX}{os.getpid()}-{os.urandom(4).hex()}"
    leaf.mkdir()
    bounds = {"pids.max": pids} if pids is not None else {}
    if memory is not None:  # v2 (no swap either), or v1 (memory and swap together)
        bounds |= {"memory.max": memory, "memory.swap.max": 0,
                   "memory.limit_in_bytes": memory, "memory.memsw.limit_in_bytes": memory}
    try:
        for name, value in bounds.items():
            if (leaf / name).exists():  # the controllers of this folder take it
                (leaf / name).write_text(str(value))
    except OSError:
        leaf.rmdir()
        raise
    return leaf


def _enter(leaves: list[Path]) -> None:
    """In bubblewrap's process before exec: into this tree's cgroups."""
    for leaf in leaves:
        (leaf / "cgroup.procs").write_text(str(os.getpid()))


def _oom_kills(leaf: Path) -> int:
    """How many processes the kernel killed in ``leaf`` at its memory bound (v2's
    memory.events, v1's memory.oom_control: ``oom_kill N``)."""
    for name in ("memory.events", "memory.oom_control"):
        with contextlib.suppress(OSError, ValueError):
            for line in (leaf / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    return 0


def _empty(leaf: Path) -> None:
    """Kill what is left in ``leaf`` (bubblewrap's PID namespace ends with it, so this is
    only a process that left it) and remove it."""
    for _ in range(100):
        try:
            pids = (leaf / "cgroup.procs").read_text().split()
        except OSError:
            return
        if not pids:
            with contextlib.suppress(OSError):
                leaf.rmdir()
                return
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(int(pid), signal.SIGKILL)
        time.sleep(0.01)


def _clean_up(leaves: list[Path], memory: int | None) -> None:
    """Once bubblewrap exited: say whether the kernel killed a process at the memory bound
    (``OUT_OF_MEMORY``, the last line), then empty and remove the tree's cgroups."""
    killed = sum(_oom_kills(leaf) for leaf in leaves)
    for leaf in leaves:
        _empty(leaf)
    if killed and memory is not None:
        print(f"{OUT_OF_MEMORY}: the kernel killed {killed} of its processes past "
              f"{memory >> 20} MiB (FARM_SANDBOX_MEMORY)", file=sys.stderr, flush=True)


def _filter_fd(program: str) -> int:
    fd = os.memfd_create("specfarm-seccomp")  # passed to bubblewrap (pass_fds)
    os.write(fd, bytes.fromhex(program))
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def main(argv: list[str]) -> int:
    """Start ``argv``'s bubblewrap command confined as its options say; its exit status."""
    options, command = _parse(argv)
    # Ended with the worker, as bubblewrap would be (--die-with-parent), but by a signal
    # it can act on: bubblewrap stops, and its cgroup goes.
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != options.parent:  # the worker died before the death signal was asked
        # Checked before bubblewrap starts: one stopped while it sets up can leave its
        # sandboxed child running (it asks for its own death signal after its clone).
        os.kill(os.getpid(), signal.SIGTERM)
    fds: list[int] = []
    if options.filter:
        fds.append(_filter_fd(options.filter))
        command = [command[0], "--seccomp", str(fds[0]), *command[1:]]
    leaves: list[Path] = []
    try:
        for folder in options.cgroup:
            leaves.append(_make(folder, options.pids, options.memory))
        child = subprocess.Popen(command, pass_fds=fds, preexec_fn=lambda: _enter(leaves))
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"{CANNOT_CONFINE} ({exc})", file=sys.stderr)
        for leaf in leaves:
            _empty(leaf)
        return NOT_CONFINED

    def stop(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            child.send_signal(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, stop)
    code = child.wait()
    _clean_up(leaves, options.memory)
    if code < 0:  # killed: so is this, that the caller sees the same signal
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
