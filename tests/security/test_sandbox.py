"""The sandbox a commit's code runs in (workers/job/runtime/sandbox.py), for real: bubblewrap
around a program that tries to leave (network, the worker's files and environment, writes
outside its folder), and around a real llama-server measured as the farm measures it.
tests/security/test_hostile_commit.py drives a hostile commit through `farm run` and a
worker; this file pins each wall on its own, and shows each one can fail (the cgroup bounds:
tests/security/test_sandbox_cgroups.py)."""

from __future__ import annotations

import errno
import json
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.errors import BuildUnavailable, ConfigError
from farm.settings import load_settings
from tests.helpers import matrix_dict, run_cli, write_matrix
from workers.fleet.config import load_worker_config
from workers.job.runtime import sandbox as sandbox_module
from workers.job.runtime.bounds import SandboxBounds, node_bounds
from workers.job.runtime.client import ServerClient
from workers.job.runtime.sandbox import Sandbox, sandbox_status
from workers.job.runtime.seccomp import REFUSED, container_profile
from workers.job.runtime.server import LlamaServer, child_env
from workers.job.telemetry import Sampler
from workers.paths import NodePaths
from workers.setup.provision import Provisioned

# The system's Python (under /usr, which the sandbox binds): the test's own is in .venv.
PYTHON = "/usr/bin/python3"
PROFILE = Path(__file__).resolve().parents[2] / "deploy" / "worker-seccomp.json"
ESCAPE = """
import os, socket, sys
port, canary, outside, inside = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
said = []
try:
    said.append("read " + open(canary).read())
except OSError as exc:
    said.append(f"no read: {exc.strerror}")
said.append("env " + os.environ.get("FARM_CANARY_SECRET", "-"))
try:
    with socket.create_connection(("127.0.0.1", port), timeout=2) as conn:
        conn.sendall(b"hello from inside")
    said.append("connected")
except OSError as exc:
    said.append(f"no connection: {exc.strerror or exc}")
for path in (outside, inside):
    try:
        open(path, "w").write("x")
        said.append("wrote " + path)
    except OSError as exc:
        said.append(f"no write {path}: {exc.strerror}")
print("|".join(said))
"""


@pytest.fixture
def listener() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP listener on 127.0.0.1 and what it received, for a bounded few seconds."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                received.append(conn.recv(1024) or b"<connected>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], received
    finally:
        stop.set()
        thread.join()
        server.close()


def _escape(sandbox: Sandbox, tmp_path: Path, port: int,
            monkeypatch: pytest.MonkeyPatch) -> str:
    config = tmp_path / "worker-config"
    config.mkdir()
    (config / "canary").write_text("CANARY-7f3a")
    monkeypatch.setenv("FARM_CANARY_SECRET", "SECRET-9b1c")
    monkeypatch.setenv("GGML_CANARY", "inherited")  # an allow-listed prefix reaches it
    folder = tmp_path / "build"
    folder.mkdir()
    argv = [PYTHON, "-c", ESCAPE, str(port), str(config / "canary"),
            str(tmp_path / "outside.txt"), str(folder / "inside.txt")]
    env = child_env(None)
    done = subprocess.run(sandbox.command(argv, env, trusted=False, write=[folder]), env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_sandboxed_program_reaches_no_network_secret_or_folder_but_its_own(
        tmp_path: Path, listener: tuple[int, list[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    port, received = listener
    said = _escape(Sandbox("on"), tmp_path, port, monkeypatch).split("|")
    assert said[0].startswith("no read: No such file"), said
    assert said[1] == "env -", said
    assert said[2].startswith("no connection"), said
    # A write outside lands in the sandbox's private /tmp (bubblewrap made the folders on
    # the way to its bind there) and is gone with it: nothing appears outside.
    assert said[4].startswith("wrote"), said
    assert received == [] and not (tmp_path / "outside.txt").exists()
    assert (tmp_path / "build" / "inside.txt").read_text() == "x"


def test_with_the_sandbox_off_the_same_program_reaches_everything(
        tmp_path: Path, listener: tuple[int, list[bytes]],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The walls above are the sandbox's: without it the program gets through (only the
    environment stays cleared, as it always is)."""
    port, received = listener
    said = _escape(Sandbox("off"), tmp_path, port, monkeypatch).split("|")
    assert said[0] == "read CANARY-7f3a" and said[2] == "connected", said
    assert (tmp_path / "outside.txt").exists() and received == [b"hello from inside"]
    assert said[1] == "env -", said  # child_env's allow-list, sandbox or not


def test_a_node_without_bubblewrap_runs_its_operators_builds_and_no_jobs_commit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kernel without user namespaces cannot be made here; a missing bubblewrap can."""
    monkeypatch.setattr(sandbox_module, "BWRAP", "bwrap-not-installed")
    sandbox_module._unavailable.cache_clear()  # pylint: disable=protected-access
    try:
        on = Sandbox("on")
        assert on.wraps(trusted=True) is False
        with pytest.raises(BuildUnavailable, match=r"bubblewrap is not installed.*FARM_SANDBOX"):
            on.wraps(trusted=False)
        assert "no job's commit is built" in sandbox_status(on)
        assert Sandbox("off").wraps(trusted=False) is False
    finally:
        sandbox_module._unavailable.cache_clear()  # pylint: disable=protected-access


def _measured(provisioned: Provisioned, smollm2: Path, log: Path,
              sandbox: Sandbox) -> tuple[float, float, str, dict[str, str]]:
    server = LlamaServer(str(provisioned.server), str(smollm2),
                         ["--ctx-size", "512", "--threads", "1"], log, sandbox=sandbox)
    with server, ServerClient(server.http_transport()) as client, \
            Sampler([], server.pid, interval=0.05) as sampler:
        assert server.pid is not None
        exe = os.readlink(f"/proc/{server.pid}/exe")
        environ = dict(item.split("=", 1) for item in
                       Path(f"/proc/{server.pid}/environ").read_text().split("\0") if item)
        client.generate("Count to five.", mode="completion", n_predict=8,
                        sampling={"temperature": 0.0, "seed": 1}, ignore_eos=True)
        began = sampler.mark()
        client.generate("Write a long story about a lighthouse.", mode="completion",
                        n_predict=96, sampling={"temperature": 0.0, "seed": 1},
                        ignore_eos=True)
        telemetry = sampler.summarize(began, sampler.mark())
    assert telemetry.rss_mb is not None and telemetry.cpu_seconds is not None
    return telemetry.rss_mb, telemetry.cpu_seconds, exe, environ


@pytest.mark.server
@pytest.mark.alone
def test_a_sandboxed_server_is_measured_as_one_without_the_sandbox(
        provisioned: Provisioned, smollm2: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Telemetry reads the server's own process inside the sandbox (not bubblewrap's):
    the same RSS and CPU time as the same server without it; its environment holds none of
    the worker's settings."""
    monkeypatch.setenv("FARM_DATABASE_URL", "postgresql://farm:SECRET-9b1c@db/farm")
    on = _measured(provisioned, smollm2, tmp_path / "on.log", Sandbox("on"))
    off = _measured(provisioned, smollm2, tmp_path / "off.log", Sandbox("off"))
    print(f"\nsandbox on: RSS {on[0]:.0f} MiB, CPU {on[1]:.2f} s; off: RSS {off[0]:.0f} MiB, "
          f"CPU {off[1]:.2f} s")
    assert Path(on[2]).name == Path(off[2]).name == "llama-server"
    assert not any(name.startswith("FARM_") for name in on[3]), on[3]
    assert on[3]["HOME"] == "/tmp" and off[3]["HOME"] != "/tmp"
    assert abs(on[0] - off[0]) / off[0] < 0.15, (on[0], off[0])  # RSS, MiB
    assert on[1] > 0.2 * off[1] and off[1] > 0.2 * on[1], (on[1], off[1])  # CPU, s
    assert "--host /run/specfarm/llama-server.sock" in (tmp_path / "on.log").read_text()


def test_farm_run_says_when_a_commit_would_run_unsandboxed(tmp_path: Path,
                                                           smollm2: Path) -> None:
    matrix = write_matrix(tmp_path, matrix_dict(smollm2))
    quiet = run_cli("run", "--dry-run", str(matrix))
    assert quiet.exit_code == 0 and "sandbox" not in quiet.output, quiet.output
    off = run_cli("run", "--dry-run", str(matrix), env={"FARM_SANDBOX": "off"})
    assert off.exit_code == 0, off.output
    assert "note: sandbox: off (set by this node's operator)" in off.output


def test_a_sandbox_setting_other_than_on_or_off_is_refused_naming_it(
        tmp_path: Path, node_paths: NodePaths, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_SANDBOX", "maybe")
    with pytest.raises(ConfigError, match="FARM_SANDBOX='maybe'"):
        load_settings()
    config = tmp_path / "worker.yaml"
    config.write_text("gpu-class: cpu\nsandbox: 'no\\n'\nbuilds: {}\nsources: [x]\n")
    with pytest.raises(ConfigError, match=r"worker.yaml: sandbox: Input should be 'on' or 'off'"):
        load_worker_config(config, node_paths, gpu_class=None, devices=None)


# Inside the sandbox: each syscall number given, called with zeros (harmless without
# capabilities, even where a call is let through), and what it got; then the kernel's
# seccomp mode, a nested user namespace, and a write past the /tmp size.
WALLS = """
import ctypes, os, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
got = []
for nr in map(int, sys.argv[1:]):
    ctypes.set_errno(0)
    done = libc.syscall(nr, 0, 0, 0, 0, 0, 0)
    got.append(f"{nr}:{ctypes.get_errno() if done == -1 else 'ok'}")
print(" ".join(got))
print([line for line in open("/proc/self/status") if line.startswith("Seccomp:")][0].split()[1])
nested = subprocess.run(["unshare", "-U", "true"], capture_output=True, text=True)
print(nested.returncode, nested.stderr.strip())
try:
    with open("/tmp/fill", "wb") as out:
        out.write(bytes(2 << 20))
    print("wrote 2 MiB")
except OSError as exc:
    print(os.strerror(exc.errno))
"""


def _walls(sandbox: Sandbox, numbers: list[int]) -> list[str]:
    env = child_env(None)
    argv = [PYTHON, "-c", WALLS, *map(str, numbers)]
    done = subprocess.run(sandbox.command(argv, env, trusted=False), env=env,
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_the_sandbox_refuses_each_declared_syscall_nested_namespaces_and_a_full_tmp() -> None:
    """Every call of REFUSED (those this machine has) fails with EPERM, ptrace and mount
    among them; `unshare -U` is refused; a write past the private /tmp's size fails with
    ENOSPC. Without the sandbox the same program gets through (keyctl and bpf answer
    EINVAL to zeros, `unshare -U` works: the walls are the sandbox's)."""
    import pyseccomp

    numbers = {name: pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
               for name in REFUSED}
    here = {name: nr for name, nr in numbers.items() if nr >= 0}
    assert {"ptrace", "mount", "unshare", "bpf", "keyctl"} <= set(here)
    inside = _walls(Sandbox("on", SandboxBounds(tmp=1 << 20)), list(here.values()))
    refused = dict(item.split(":") for item in inside[0].split())
    assert refused == {str(nr): str(errno.EPERM) for nr in here.values()}, refused
    assert inside[1] == "2"  # a seccomp filter
    assert inside[2].startswith("1 ") and "Operation not permitted" in inside[2], inside
    assert inside[3] == os.strerror(errno.ENOSPC), inside
    outside = _walls(Sandbox("off"), [here["keyctl"], here["bpf"]])
    assert outside[0] == f"{here['keyctl']}:{errno.EINVAL} {here['bpf']}:{errno.EINVAL}"
    assert outside[1] == "0", outside
    assert outside[2].startswith("0"), outside  # root here, or unprivileged namespaces


def test_sandbox_bounds_that_are_not_numbers_or_a_cgroup_are_refused_naming_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("PIDS", "lots"), ("PIDS", "8"), ("MEMORY", "1KiB"),
                        ("TMP", "-1"), ("CGROUP", "/specfarm\nx")):
        monkeypatch.setenv(f"FARM_SANDBOX_{name}", value)
        node_bounds.cache_clear()
        with pytest.raises(ConfigError, match=f"^FARM_SANDBOX_{name}="):
            Sandbox("on").wraps(trusted=True)  # before any sandboxed process starts
        monkeypatch.delenv(f"FARM_SANDBOX_{name}")
    node_bounds.cache_clear()
    missing = Sandbox("on", SandboxBounds(cgroup="/specfarm-not-delegated"))
    assert ("no pids or memory bound: FARM_SANDBOX_CGROUP=/specfarm-not-delegated: no cgroup"
            in sandbox_status(missing))


def _in_container(names: list[str]) -> subprocess.CompletedProcess[str]:
    """A sandboxed program run under a seccomp filter refusing ``names`` with EPERM, as
    Docker applies a container's profile to the worker."""
    import pyseccomp

    profile = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    for name in names:
        profile.add_rule(pyseccomp.ERRNO(errno.EPERM), name)
    env = child_env(None)
    argv = Sandbox("on").command([PYTHON, "-c", "print('inside')"], env, trusted=False)
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60,
                          check=False, preexec_fn=profile.load)


def test_bubblewrap_builds_the_sandbox_under_the_containers_seccomp_profile() -> None:
    """compose's profile is the sandbox's list less what bubblewrap needs to build it: the
    sandbox starts under it, and not under the whole list."""
    profile = json.loads(PROFILE.read_text())
    assert profile == container_profile(), (
        f"{PROFILE} differs from workers.job.runtime.seccomp.container_profile(): write "
        "that as JSON there")
    [refused] = profile["syscalls"]
    done = _in_container(refused["names"])
    assert done.returncode == 0 and done.stdout == "inside\n", done.stderr
    assert _in_container(list(REFUSED)).returncode != 0
