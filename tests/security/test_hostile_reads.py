"""What a hostile build or server leaves for the worker to read: crafted files in a build
folder, endless build output, a folder of mode 000 hiding a large file, hostile HTTP
answers, a socket replaced by a link, endless server output.

Each is refused or bounded with one clear error, in seconds (every read runs under a
timeout guard), and the worker's memory stays flat: ``_refused`` resets the kernel's
peak-RSS mark of this process (``/proc/self/clear_refs``) and reads how far above its
resident size before the peak went while the hostile input was read. The server is a fake
on purpose (tests/security/hostile_server.py): it does what no real llama-server does
(tests/security/test_hostile_commit.py plants a real commit that does the same).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from farm.errors import BenchmarkError, BuildFailed, ConfigError, ServerStartError
from workers.job.runtime import bounded_http, client, probe
from workers.job.runtime.client import ServerClient
from workers.job.runtime.probe import PROBE_BYTES, probe_binary
from workers.job.runtime.sandbox import Sandbox
from workers.job.runtime.server import OUTPUT_BYTES, LlamaServer
from workers.job.runtime.untrusted_files import (
    ENTRY_BYTES,
    copy_file,
    file_below,
    folder_bytes,
)
from workers.paths import NodePaths
from workers.setup.builds import BuildRequest, build
from workers.setup.ccache import CCACHE_LOG, CCACHE_LOG_BYTES, ccache_counts
from workers.setup.steps import CUT_MARK, LINE_BYTES, compile_step
from workers.setup.steps import OUTPUT_BYTES as STEP_OUTPUT

MIB = 1 << 20
HOSTILE_SERVER = Path(__file__).with_name("hostile_server.py")


def _status(field: str) -> int:
    found = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.M)
    assert found, field
    return int(found[1]) << 10


def _refused(name: str, kind: type[BaseException], action: Callable[[], object]
             ) -> tuple[BaseException, float]:
    """The ``kind`` of error ``action`` raises (within 30 s), and how many MiB this
    process's peak RSS rose above its RSS before while it ran (printed: ``pytest -s``)."""
    Path("/proc/self/clear_refs").write_text("5")  # the peak mark back to the RSS now
    before = _status("VmRSS")
    error = _within(30, action)
    peak = _status("VmHWM")
    growth = (peak - before) / MIB
    print(f"\n{name}: peak RSS {peak / MIB:.1f} MiB, {growth:.1f} MiB above before")
    assert isinstance(error, kind), error
    return error, growth


def _within(seconds: float, action: Callable[[], object]) -> BaseException | None:
    """What ``action`` raised (None if nothing), failing the test if it has not returned
    within ``seconds`` (a FIFO read without O_NONBLOCK would block for ever)."""
    caught: list[BaseException] = []

    def run() -> None:
        try:
            action()
        except BaseException as exc:  # handed to the test
            caught.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still blocked after {seconds} s"
    return caught[0] if caught else None


# --- files a build leaves ------------------------------------------------------------------

def test_a_fifo_as_ccache_stats_is_refused_at_once(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / CCACHE_LOG)
    error = _within(5, lambda: ccache_counts(tmp_path))
    assert isinstance(error, BuildFailed)
    assert str(error) == (f"the build's ccache.stats ({tmp_path / CCACHE_LOG}) is a FIFO, not "
                          "a regular file: refused; the farm reads only a regular file there")


def test_a_link_to_dev_zero_as_ccache_stats_is_refused_unread(tmp_path: Path) -> None:
    (tmp_path / CCACHE_LOG).symlink_to("/dev/zero")
    error, growth = _refused("ccache.stats -> /dev/zero", BuildFailed,
                             lambda: ccache_counts(tmp_path))
    assert str(error) == (f"the build's ccache.stats ({tmp_path / CCACHE_LOG}) is a symbolic "
                          "link: refused; the farm reads only a regular file there")
    assert growth < 8


def test_a_ccache_stats_over_its_bound_is_refused_and_an_honest_one_is_counted(
        tmp_path: Path) -> None:
    with (tmp_path / CCACHE_LOG).open("wb") as stats:
        stats.truncate(CCACHE_LOG_BYTES + 1)  # sparse: costs no disk
    with pytest.raises(BuildFailed, match=rf"holds more than {CCACHE_LOG_BYTES} bytes, the "
                                          "farm's bound for it: refused"):
        ccache_counts(tmp_path)
    (tmp_path / CCACHE_LOG).write_text("direct_cache_hit\ncache_miss\npreprocessed_cache_hit\n")
    assert ccache_counts(tmp_path) == (2, 1)
    (tmp_path / CCACHE_LOG).unlink()
    assert ccache_counts(tmp_path) == (0, 0)


@pytest.mark.parametrize("kind", ["link", "fifo"])
def test_a_binary_left_as_a_link_or_fifo_is_not_copied_out(tmp_path: Path, kind: str) -> None:
    binary = tmp_path / "llama-server"
    if kind == "link":
        binary.symlink_to("/etc/passwd")
    else:
        os.mkfifo(binary)
    error = _within(5, lambda: copy_file(binary, tmp_path / "copy", 1 << 30,
                                         what="the build's llama-server", error=BuildFailed))
    assert isinstance(error, BuildFailed) and "refused" in str(error)
    assert not (tmp_path / "copy").exists()


def test_a_bin_folder_or_binary_that_is_a_link_is_refused_before_it_is_probed(
        tmp_path: Path) -> None:
    """What a build leaves at bin/TARGET is copied out (and probed) only as a regular file
    in a folder of the build's own: a link at bin, or at the binary, is refused by name."""
    build = tmp_path / "build"
    build.mkdir()
    assert file_below(build, "bin/llama-server", what="x", error=BuildFailed) is None
    (build / "bin").symlink_to(tmp_path)
    (tmp_path / "llama-server").write_text("the operator's")
    with pytest.raises(BuildFailed, match=r"^the build's llama-server \(\S+/build/bin\) is a "
                       "symbolic link, not a folder: refused"):
        file_below(build, "bin/llama-server", what="the build's llama-server", error=BuildFailed)
    (build / "bin").unlink()
    (build / "bin").mkdir()
    (build / "bin" / "llama-server").symlink_to(tmp_path / "llama-server")
    with pytest.raises(BuildFailed, match="is a symbolic link, not a regular file: refused"):
        file_below(build, "bin/llama-server", what="the build's llama-server", error=BuildFailed)
    (build / "bin" / "llama-server").unlink()
    (build / "bin" / "llama-server").write_text("built")
    assert file_below(build, "bin/llama-server", what="x", error=BuildFailed) == \
        build / "bin" / "llama-server"


def test_empty_files_count_towards_the_disk_bound(tmp_path: Path) -> None:
    """A million empty files fill a disk's inodes: each entry counts a block."""
    for index in range(1000):
        (tmp_path / str(index)).touch()
    assert folder_bytes(tmp_path) >= 1000 * ENTRY_BYTES


# --- what a build prints ---------------------------------------------------------------------

ENDLESS_LINE = "import os\nchunk = b'x' * (1 << 20)\nwhile True:\n    os.write(1, chunk)\n"


def test_an_endless_build_line_stops_the_step_with_the_memory_flat(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    started = time.monotonic()
    error, growth = _refused("build output: one endless line", BuildFailed, lambda: compile_step(
        [sys.executable, "-c", ENDLESS_LINE], {}, "the build", log, sandbox=Sandbox("off")))
    assert str(error) == f"the build was stopped: it printed over {STEP_OUTPUT >> 20} MiB " \
                         f"(log: {log})"
    assert time.monotonic() - started < 30
    assert growth < 16
    # The log holds the command, the line's first LINE_BYTES and how much was cut: per
    # step at most what it read.
    text = log.read_bytes()
    assert len(text) < LINE_BYTES + 4096
    assert re.search(rb"x{%d} \[the farm cut this line here: \d+ more bytes\]\n" % LINE_BYTES,
                     text)


FAILING_CONFIGURE = """cmake_minimum_required(VERSION 3.14)
project(hostile NONE)
file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/locked/deeper)
file(WRITE ${CMAKE_BINARY_DIR}/locked/deeper/left.bin "left behind")
execute_process(COMMAND mkfifo ${CMAKE_BINARY_DIR}/ccache.stats)
execute_process(COMMAND chmod 000 ${CMAKE_BINARY_DIR}/locked)
message(FATAL_ERROR "this commit does not configure")
"""


def test_a_failed_commits_build_folder_is_removed_whatever_it_left(
        tmp_path: Path, node_paths: NodePaths) -> None:
    """A job's commit whose configure fails after leaving a FIFO and a mode-000 folder
    holding a file: the build fails with the commit's own line and its folder is gone (it
    stayed, with what it held, until that commit's next build)."""
    tree = tmp_path / "commit"
    tree.mkdir()
    (tree / "CMakeLists.txt").write_text(FAILING_CONFIGURE)
    with pytest.raises(BuildFailed, match="cmake configure"):
        build(BuildRequest(name="hostile", source=str(tree), trusted=False), node_paths)
    assert [path.name for path in tree.iterdir() if path.is_dir()] == []
    [log] = [path for path in tree.iterdir() if path.suffix == ".log"]
    assert "this commit does not configure" in log.read_text()


# --- what a commit's binary prints when probed -------------------------------------------


def _binary(tmp_path: Path, body: str, folder: str = "") -> Path:
    """A commit's "llama-server": a script doing ``body`` whatever its flag (in ``folder``,
    which its command line names)."""
    binary = tmp_path / folder / "llama-server"
    binary.parent.mkdir(exist_ok=True)
    binary.write_text(f"#!{sys.executable}\n{body}")
    binary.chmod(0o755)
    return binary


def test_a_probe_of_a_binary_printing_without_end_is_refused_with_the_memory_flat(
        tmp_path: Path) -> None:
    binary = _binary(tmp_path, ENDLESS_LINE)
    error, growth = _refused("probe: --version without end", ConfigError,
                             lambda: probe_binary(binary, Sandbox("off"), trusted=True))
    assert str(error) == (f"{binary} --version printed over {PROBE_BYTES} bytes, the farm's "
                          "bound for a probe: is this a llama-server binary?")
    assert growth < 16


@pytest.mark.parametrize("fork", ["os.fork()", "os.fork() and os._exit(0)"])
def test_a_probe_that_never_ends_is_stopped_at_its_bound_with_its_daemon(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fork: str) -> None:
    """A binary that forks a child holding the pipes and sleeps, or exits and leaves that
    child: the probe gives up at its time bound (here 2 s) and kills the whole process
    group (the marker is in the binary's path: in both processes' command lines)."""
    monkeypatch.setattr(probe, "_PROBE_SECONDS", 2)
    marker = f"probe-sleeper-{os.getpid()}"
    binary = _binary(tmp_path, f"import os, time\n{fork}\ntime.sleep(300)\n", marker)
    started = time.monotonic()
    error = _within(30, lambda: probe_binary(binary, Sandbox("off"), trusted=True))
    assert isinstance(error, ConfigError)
    assert str(error) == f"{binary} --version did not finish within 2 s"
    assert time.monotonic() - started < 10
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, check=False)
    assert left.stdout == b""


def test_a_long_build_line_is_cut_and_marked_and_the_build_goes_on(tmp_path: Path) -> None:
    long_line = "import sys; sys.stdout.write('y' * (3 << 20) + '\\nafter\\n')"
    log = tmp_path / "build.log"
    compile_step([sys.executable, "-c", long_line], {}, "the build", log, sandbox=Sandbox("off"))
    lines = log.read_bytes().split(b"\n")
    assert lines[1] == b"y" * LINE_BYTES + CUT_MARK % ((3 << 20) - LINE_BYTES)
    assert lines[2] == b"after"


# --- a folder of mode 000 in the build folder ------------------------------------------------

# In a child process: as root without the capabilities that read past a folder's mode (so
# root sees what an unprivileged worker sees), the old walk, the disk bound and removal.
WALK = """
import json, os, sys
from pathlib import Path
from workers.job.runtime.untrusted_files import folder_bytes, remove_folder
from workers.setup.steps import over_bound
folder = Path(sys.argv[1])
walked = sum(os.lstat(os.path.join(root, name)).st_size
             for root, _, files in os.walk(folder) for name in files)
counted, why = folder_bytes(folder / "CMakeFiles"), over_bound(folder)
remove_folder(folder)
print(json.dumps({"walked": walked, "counted": counted, "why": why, "left": folder.exists()}))
"""
_PR_CAPBSET_DROP, _READ_PAST_MODES = 24, (1, 2, 3)  # CAP_DAC_OVERRIDE, _READ_SEARCH, FOWNER


def _as_owner_only() -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    for capability in _READ_PAST_MODES:
        if libc.prctl(_PR_CAPBSET_DROP, capability) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def test_a_mode_000_folder_counts_in_the_disk_bound_and_is_removed(tmp_path: Path) -> None:
    build = tmp_path / "build-specfarm-0123456789ab"
    hidden = build / "CMakeFiles" / "hide" / "deeper"
    hidden.mkdir(parents=True)
    with (hidden / "big.o").open("wb") as big:
        big.truncate(40 << 30)  # sparse: 40 GiB to the size, no disk
    (build / "out").symlink_to("/etc")  # never followed, never removed through
    deep = build / "deep"
    for _ in range(200):  # deeper than the walk holds descriptors for
        deep = deep / "d"
    deep.mkdir(parents=True)
    (deep / "f").write_text("x")
    for folder in (hidden, hidden.parent, deep):
        folder.chmod(0)
    root = os.geteuid() == 0
    done = subprocess.run([sys.executable, "-c", WALK, str(build)], capture_output=True,
                          text=True, timeout=60, preexec_fn=_as_owner_only if root else None,
                          check=False)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert found["walked"] < 1 << 20  # os.walk saw none of it: the input has teeth
    assert found["counted"] >= 40 << 30
    assert found["why"] == "it nests folders deeper than 128"
    assert not found["left"] and not build.exists()
    assert Path("/etc/passwd").exists()


def test_the_disk_bound_counts_a_sparse_file_by_its_size(tmp_path: Path) -> None:
    from workers.setup.steps import over_bound
    hidden = tmp_path / "hide"
    hidden.mkdir()
    with (hidden / "big.o").open("wb") as big:
        big.truncate(40 << 30)
    hidden.chmod(0)
    assert over_bound(tmp_path) == "its build folder holds over 32 GiB"


# --- a hostile HTTP server over a UNIX socket --------------------------------------------------

@pytest.fixture
def hostile() -> Iterator[Callable[[str], ServerClient]]:
    """``hostile(mode)``: a client of tests/security/hostile_server.py answering every
    request as its ANSWERS[mode] says (another process: its memory is not the worker's)."""
    folder = Path(tempfile.mkdtemp(prefix="hostile-"))
    servers: list[subprocess.Popen[bytes]] = []
    clients: list[ServerClient] = []

    def serve(mode: str) -> ServerClient:
        socket = folder / f"{len(servers)}.sock"
        servers.append(subprocess.Popen([sys.executable, str(HOSTILE_SERVER), "--host",
                                         str(socket), "--hostile", mode, "--decoy",
                                         f"{socket}.decoy"]))
        deadline = time.monotonic() + 10
        while not socket.exists():
            assert time.monotonic() < deadline, "the hostile server did not start"
            time.sleep(0.01)
        clients.append(ServerClient(httpx.HTTPTransport(uds=str(socket)), request_timeout=2.0))
        return clients[-1]

    yield serve
    for made in clients:
        made.close()
    for server in servers:
        server.kill()
        server.wait()
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def _generate(made: ServerClient, n_predict: int = 8) -> object:
    return made.generate("hi", mode="completion", n_predict=n_predict, sampling={})


@pytest.mark.parametrize(("scenario", "call", "message", "most_mib"), [
    ("huge position", ServerClient.spec_counters,
     "the server's /metrics names draft position 1000000000, over the farm's bound of "
     f"{client.MAX_POSITIONS - 1}: refused", 4),
    ("huge count", ServerClient.spec_counters,
     "the server's /metrics gives spec_decode_num_drafts_total the value '1e400', not a "
     "count (a whole number from 0 to 2^63 - 1): refused", 4),
    ("endless metrics", ServerClient.spec_counters,
     "GET /metrics: the server's answer is over 1048576 bytes, the farm's bound for it: "
     "refused", 8),
    ("endless stream", _generate,
     "POST /completion: the server streamed over 80 events for 8 tokens, the farm's bound: "
     "refused", 8),
    ("endless stream line", lambda made: _generate(made, n_predict=1024),
     "POST /completion: a line of the server's stream is over 1048576 bytes, the farm's "
     "bound: refused", 8),
    ("slow stream", lambda made: _generate(made, n_predict=1),
     "POST /completion: the server streamed for over 3 s for 1 token, the farm's bound: "
     "refused", 4),
    ("endless error body", _generate, "POST /completion answered 500: " + "E" * 500, 4),
    ("huge slots", ServerClient.slot_contexts,
     "GET /slots: the server's answer is over 33554432 bytes, the farm's bound for it: "
     "refused", 100),
    ("deep slots", ServerClient.slot_contexts,
     "/slots: the server answered something of another shape than llama-server's "
     "(RecursionError", 16),
    ("many containers", ServerClient.slot_contexts,
     f"/slots: the server's answer holds over {bounded_http.JSON_CONTAINERS} arrays or "
     "objects, the farm's bound for it: refused", 100),
    ("infinite speed", _generate,
     "POST /completion's timings: the server answered something of another shape than "
     "llama-server's (ValueError: predicted_per_second is 'inf', not a speed)", 4),
])
def test_a_hostile_answer_is_one_clear_error_with_the_memory_bounded(
        hostile: Callable[[str], ServerClient], scenario: str,
        call: Callable[[ServerClient], object], message: str, most_mib: float) -> None:
    made = hostile(scenario)
    started = time.monotonic()
    error, growth = _refused(scenario, BenchmarkError, lambda: call(made))
    assert str(error).startswith(message), str(error)
    assert time.monotonic() - started < 15
    assert growth < most_mib, f"{scenario}: peak RSS rose {growth:.1f} MiB"


# --- a server that replaces its socket, or prints without end ---------------------------------

@pytest.fixture
def fake_server(tmp_path: Path) -> Iterator[Callable[[str], tuple[LlamaServer, Path]]]:
    """``fake_server(mode)``: a LlamaServer of tests/security/hostile_server.py acting
    ``mode``, and its decoy socket (``DECOY.reached`` appears when anything connects)."""
    binary = tmp_path / "llama-server"
    binary.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HOSTILE_SERVER}" "$@"\n')
    binary.chmod(0o755)
    decoys: list[Path] = []

    def make(mode: str) -> tuple[LlamaServer, Path]:
        decoys.append(Path(tempfile.mkdtemp(prefix="decoy-")) / "decoy.sock")
        return LlamaServer(str(binary), "unused.gguf",
                           ["--hostile", mode, "--decoy", str(decoys[-1])],
                           tmp_path / "server.log", sandbox=Sandbox("off"), trusted=True,
                           startup_timeout=20), decoys[-1]

    yield make
    for decoy in decoys:
        for path in decoy.parent.iterdir():
            path.unlink()
        decoy.parent.rmdir()


FakeServer = Callable[[str], tuple[LlamaServer, Path]]


def test_a_socket_that_is_a_link_is_refused_and_never_connected_to(
        fake_server: FakeServer) -> None:
    server, decoy = fake_server("link")
    with pytest.raises(ServerStartError, match=r"^llama-server's socket \(\S+\) is a "
                       "symbolic link: refused; the farm connects only to a socket the "
                       r"server made there itself \(server log: "):
        server.start()
    assert not Path(f"{decoy}.reached").exists()


def test_a_socket_replaced_by_a_link_later_is_not_followed(fake_server: FakeServer) -> None:
    server, decoy = fake_server("swap")
    with server, ServerClient(server.http_transport()) as made:
        assert server.socket_path.is_symlink()  # swapped as /health answered
        assert made.spec_counters().drafts == 5  # the server's own socket, held
    assert not Path(f"{decoy}.reached").exists()


def test_a_server_printing_without_end_is_stopped_at_its_bound(
        fake_server: FakeServer, tmp_path: Path) -> None:
    server, _ = fake_server("print")
    error, growth = _refused("server output at start", ServerStartError, server.start)
    assert str(error).startswith(f"llama-server printed over {OUTPUT_BYTES} bytes, the "
                                 "farm's bound for this server's output, and was stopped "
                                 f"(server log: {tmp_path / 'server.log'})")
    assert str(error).count("server log:") == 1
    assert growth < 16
    assert OUTPUT_BYTES < (tmp_path / "server.log").stat().st_size < OUTPUT_BYTES + 4096


def test_a_server_printing_without_end_mid_run_fails_the_request_saying_why(
        fake_server: FakeServer) -> None:
    server, _ = fake_server("print-later")
    with pytest.raises(BenchmarkError, match=rf"^llama-server printed over {OUTPUT_BYTES} "
                                             "bytes"), server, \
            ServerClient(server.http_transport()) as made, server.output_bounded():
        made.spec_counters()
