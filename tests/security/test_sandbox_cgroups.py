"""The sandbox's cgroup bounds (workers/job/runtime/bounds.py, confine.py), for real, in a
cgroup each test delegates to itself: a fork bomb capped, an allocation past the memory
bound killed (a build step so killed is the build's failure, not the node's), a sandboxed
server whose process group the worker kills with SIGKILL leaves no process behind and its
cgroup is removed by the next launcher, and a launcher whose worker is gone stops
bubblewrap at once. Skipped where no cgroup can be delegated here."""

from __future__ import annotations

import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.errors import BuildFailed, ServerStartError
from workers.job.runtime import bounds as bounds_module
from workers.job.runtime.bounds import Cgroups, SandboxBounds, find_cgroups
from workers.job.runtime.sandbox import Sandbox, sandbox_status
from workers.job.runtime.server import LlamaServer, child_env
from workers.setup.steps import compile_step

# The system's Python (under /usr, which the sandbox binds): the test's own is in .venv.
PYTHON = "/usr/bin/python3"
HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")


@pytest.fixture
def delegated() -> Iterator[str]:
    """A cgroup of this test's own, as an operator delegates one: a child of this process's
    cgroup in each hierarchy with the pids or memory controller (made here as root);
    removed after, which fails if a sandbox left a cgroup or process in it."""
    name = f"specfarm-test-{uuid.uuid4().hex[:8]}"
    mounts, own = bounds_module._mounts(), bounds_module._own_cgroups()  # pylint: disable=protected-access
    made: list[Path] = []
    for key in ("cgroup2", "pids", "memory"):
        mount = mounts.get(key)
        folder = mount and bounds_module._folder(  # pylint: disable=protected-access
            mount, own.get("" if key == "cgroup2" else key, "/"), name)
        try:
            if folder:
                folder.mkdir()
                made.append(folder)
        except OSError:
            pass
    try:
        if isinstance(find_cgroups(name), str):
            pytest.skip(f"no cgroup this test may delegate here: {find_cgroups(name)}")
        yield name
    finally:
        find_cgroups.cache_clear()
        left = [leaf for folder in made for leaf in folder.glob("sandbox-*")]
        for folder in [*left, *reversed(made)]:
            folder.rmdir()
        assert left == [], "a sandbox's cgroup outlived it"


# A fork bomb bounded by itself too (200 forks), lest a broken pids bound let it loose on
# the node: its children stay behind asleep, and the sandbox's end ends them.
BOMB = """
import os, time
forked = 0
while forked < 200:
    try:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
    except OSError as exc:
        print(f"forked {forked}, then {os.strerror(exc.errno)}", flush=True)
        break
    forked += 1
else:
    print(f"forked {forked}, all", flush=True)
"""


def test_a_fork_bomb_in_the_sandbox_is_capped_by_its_pids_bound(delegated: str) -> None:
    """A fork bomb stops at the pids bound (64, bubblewrap's two processes included), the
    node keeps forking, and everything it started is gone with its cgroup."""
    sandbox = Sandbox("on", SandboxBounds(cgroup=delegated, pids=64))
    assert "64 processes" in sandbox_status(sandbox)
    marker = f"bomb-{delegated}"
    env = child_env(None)
    done = subprocess.run(sandbox.command([PYTHON, "-c", BOMB, marker], env, trusted=False),
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    forked = int(done.stdout.split()[1].rstrip(","))
    assert 40 < forked < 64 and "Resource temporarily unavailable" in done.stdout, done.stdout
    assert subprocess.run(["true"], check=False).returncode == 0  # the node forks on
    left = [pid for pid in os.listdir("/proc") if pid.isdigit()
            and marker.encode() in _cmdline(pid)]
    assert left == []


def _cmdline(pid: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def test_an_allocation_past_the_memory_bound_is_killed(delegated: str) -> None:
    sandbox = Sandbox("on", SandboxBounds(cgroup=delegated, memory=64 << 20))
    cgroups = find_cgroups(delegated)
    assert isinstance(cgroups, Cgroups) and cgroups.memory is not None
    grab = "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
    env = child_env(None)
    done = subprocess.run(sandbox.command([PYTHON, "-c", grab], env, trusted=False), env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert "allocated" not in done.stdout
    assert done.returncode in (128 + 9, -9) or "MemoryError" in done.stderr, done




def _leaves(delegated: str) -> list[Path]:
    cgroups = find_cgroups(delegated)
    assert isinstance(cgroups, Cgroups)
    return [leaf for folder in {cgroups.pids, cgroups.memory} if folder is not None
            for leaf in folder.glob("sandbox-*")]


def test_a_build_step_killed_at_the_memory_bound_is_the_builds_failure(
        delegated: str, tmp_path: Path) -> None:
    """The kernel's kill in the sandbox's cgroup, not this node's lack of memory: the build
    fails (BuildFailed, not handed to another node) with a line naming the bound."""
    sandbox = Sandbox("on", SandboxBounds(cgroup=delegated, memory=64 << 20))
    grab = "b = bytearray(256 << 20); b[::4096] = b'x' * len(b[::4096]); print('allocated')"
    log = tmp_path / "build.log"
    with pytest.raises(BuildFailed, match=r"^the build was killed at the sandbox's memory "
                       r"bound \(sandbox: out of memory at its bound: the kernel killed \d+ "
                       r"of its processes past 64 MiB \(FARM_SANDBOX_MEMORY\)\)"):
        compile_step([PYTHON, "-c", grab], child_env(None), "the build", log, sandbox=sandbox)
    assert "\nallocated\n" not in log.read_text()
    assert _leaves(delegated) == []


def test_a_sandboxed_server_killed_with_its_group_leaves_nothing_and_its_cgroup_goes_next(
        delegated: str, tmp_path: Path) -> None:
    """A server printing without end is stopped by SIGKILL to its process group (the
    launcher, bubblewrap): everything inside dies with them; the launcher could not remove
    its cgroup, the next one does."""
    marker = f"/tmp/decoy-{uuid.uuid4().hex}.sock"  # in every command line of the tree
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec {PYTHON} "{HOSTILE_SERVER}" "$@"\n')
    binary.chmod(0o755)
    (tmp_path / "model.gguf").touch()
    sandbox = Sandbox("on", SandboxBounds(cgroup=delegated))
    server = LlamaServer(str(binary), str(tmp_path / "model.gguf"),
                         ["--hostile", "print", "--decoy", marker], tmp_path / "server.log",
                         sandbox=sandbox, reads=[HOSTILE_SERVER], startup_timeout=30)
    with pytest.raises(ServerStartError, match="printed over"):
        server.start()
    deadline = time.monotonic() + 5
    while left := [pid for pid in os.listdir("/proc") if pid.isdigit()
                   and marker.encode() in _cmdline(pid)]:
        assert time.monotonic() < deadline, f"left behind: {left}"
        time.sleep(0.05)
    assert _leaves(delegated) != []  # SIGKILL: its launcher could not remove it
    env = child_env(None)
    done = subprocess.run(sandbox.command(["/usr/bin/true"], env, trusted=False), env=env,
                          capture_output=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert _leaves(delegated) == []


def test_a_launcher_whose_worker_is_gone_stops_bubblewrap_at_once() -> None:
    """Its worker died before the launcher could ask to die with it (here: it names another
    process as the worker): bubblewrap is stopped at once, not left running."""
    env = child_env(None)
    argv = Sandbox("on").command(["/bin/sleep", "60"], env, trusted=False)
    parent = argv.index("--parent")
    argv[parent + 1] = str(os.getppid())
    started = time.monotonic()
    done = subprocess.run(argv, env=env, capture_output=True, timeout=30, check=False)
    assert done.returncode == -15 and time.monotonic() - started < 10, done
