"""Start and stop one ``llama-server`` process: argv only, a UNIX socket, own process
group, in the node's sandbox (``workers.job.runtime.sandbox``)."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import httpx

from farm.errors import BenchmarkError, ProcessNotStarted, ServerStartError
from farm.matrix.schema import split_shards
from workers.job.runtime import server_log
from workers.job.runtime.sandbox import Sandbox, inner_pid
from workers.job.runtime.server_output import OutputToLog
from workers.job.runtime.untrusted_files import HeldSocket, read_file, remove_folder
from workers.job.started import Started

# The server answers HTTP on a UNIX socket in a folder of its own: with the sandbox on,
# in a network namespace with nothing but loopback, nothing else can reach it; a path
# needs no port, so no other process can take it first. Inside the sandbox the folder is
# bound at SOCKET_DIR, so a run's stored command line is the same on every start.
SOCKET_DIR = "/run/specfarm"
SOCKET_NAME = "llama-server.sock"
SANDBOXED = Sandbox("on")
# Why exec failed when the binary or its command line is at fault (not a lack of memory or
# processes, which may pass): it fails the same on every attempt.
_NOT_STARTABLE = frozenset({errno.ENOENT, errno.EACCES, errno.ENOEXEC, errno.ENOTDIR,
                            errno.E2BIG, errno.ELOOP, errno.ENAMETOOLONG})
# llama.cpp's trace level: a finished request's speculative statistics (per method: calls,
# drafts, tokens, draft time; server_log.SpecStatsLog) are printed from it up. It adds about
# 30 lines per request and none per token, at no measurable cost to decode speed; debug (5)
# logs every drafted candidate.
LOG_VERBOSITY = 4
_PR_SET_PDEATHSIG = 1
# The server's output (its log) as the farm writes it (``server_output``): at most
# OUTPUT_BYTES per start and OUTPUT_BYTES_PER_REQUEST more per request it is started for,
# then the server is stopped. At LOG_VERBOSITY b11434 logs 15-30 kB while starting and
# 3-4 kB per request. What the farm reads of it back is bounded too (START_LOG_BYTES
# here, server_log's reads).
OUTPUT_BYTES = 64 << 20
OUTPUT_BYTES_PER_REQUEST = 64 << 10
START_LOG_BYTES = 16 << 20
_LIBC = ctypes.CDLL("libc.so.6", use_errno=True) if sys.platform == "linux" else None


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL it when the process that started it dies (Linux).

    llama-server runs in its own session so that Ctrl-C reaches the farm first; without
    this it would outlive a worker killed with -9.
    """
    if _LIBC is not None:
        _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


# What llama-server inherits from the node's environment: where programs and libraries
# are, the home and locale, and the GPU runtimes' own settings. Nothing else: not the
# farm's URLs and passwords (FARM_*), not a Hub token or cloud credentials, and not
# llama.cpp's LLAMA_ARG_* variables, each of which sets an option no job may set.
_INHERITED = ("PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH")
_INHERITED_PREFIXES = ("LC_", "CUDA_", "GGML_", "NVIDIA_", "HIP_", "ROCR_", "HSA_")


def _healthy(client: httpx.Client) -> bool:
    """Whether the server answers /health with 200 (its body is not read)."""
    try:
        with client.stream("GET", "/health") as answer:
            return answer.status_code == 200
    except httpx.TransportError:
        return False


def child_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The allow-listed part of this process's environment, plus ``extra`` (the farm's own,
    e.g. ``CUDA_VISIBLE_DEVICES``)."""
    inherited = {name: value for name, value in os.environ.items()
                 if name in _INHERITED or name.startswith(_INHERITED_PREFIXES)}
    return {**inherited, **(extra or {})}


def server_argv(binary: str, model: str, arm_argv: Sequence[str], *, socket: str,
                parallel: int, offline: bool) -> list[str]:
    """An arm's server command line: the farm's own flags, then the arm's."""
    return [binary, "--model", model, "--host", socket,
            "--log-verbosity", str(LOG_VERBOSITY), "--parallel", str(parallel),
            "--metrics", *(["--offline"] if offline else []), *arm_argv]


class LlamaServer(Started):
    """One server process for one arm. Use as a context manager: it always stops."""

    def __init__(self, binary: str, model: str, arm_argv: list[str], log_path: Path,
                 *, parallel: int = 1, startup_timeout: float = 180.0,
                 env: dict[str, str] | None = None, offline: bool = True,
                 sandbox: Sandbox = SANDBOXED, trusted: bool = False, gpu: bool = False,
                 reads: Sequence[Path] = (), requests: int = 0) -> None:
        self.binary, self.model, self.arm_argv = binary, model, arm_argv
        self.parallel = parallel  # slots: one per simultaneous stream
        self.offline = offline  # --offline, where the build knows it
        self.env = child_env(env)
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        # In the sandbox (``Sandbox.wraps``): a job's commit always, the operator's own
        # build (``trusted``) where bubblewrap runs here.
        self.sandboxed = sandbox.wraps(trusted)
        self.sandbox, self.trusted, self.gpu = sandbox, trusted, gpu
        # What the server reads besides its binary and model (draft models, LoRAs...).
        self.reads = tuple(reads)
        # Its output's bound: OUTPUT_BYTES, and more for the ``requests`` it is started for.
        self.output_bytes = OUTPUT_BYTES + OUTPUT_BYTES_PER_REQUEST * requests
        self.log_offset = 0  # where the running server's output begins in its log
        self.start_s: float | None = None  # seconds from its launch to /health answering
        self._socket_dir: Path | None = None
        self._socket: HeldSocket | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._output: OutputToLog | None = None
        self._pid: int | None = None

    def log_text(self) -> str:
        """What the running server has logged so far (not an earlier start's output), up to
        START_LOG_BYTES: what it logged while starting, where its memory lines are."""
        return read_file(self.log_path, START_LOG_BYTES, what="the server's log",
                         error=BenchmarkError, offset=self.log_offset,
                         cut=True).decode(errors="replace")

    @property
    def socket_path(self) -> Path:
        """Where the started server answers HTTP (a UNIX socket; ``http_transport``)."""
        assert self._socket_dir is not None, "the server is not started"
        return self._socket_dir / SOCKET_NAME

    def http_transport(self) -> httpx.HTTPTransport:
        """An httpx transport to the started server's socket (base URL
        ``http://localhost``): the socket it made, held since ``start`` (``HeldSocket``),
        whatever is put at its name later."""
        assert self._socket is not None, "the server is not started"
        return httpx.HTTPTransport(uds=self._socket.address)

    @property
    def socket_arg(self) -> str:
        """The socket as the server names it: its path inside the sandbox, or where it is
        with the sandbox off."""
        where = SOCKET_DIR if self.sandboxed or self._socket_dir is None \
            else str(self._socket_dir)
        return f"{where}/{SOCKET_NAME}"

    @property
    def argv(self) -> list[str]:
        """The server's command line as it runs it (``server_argv``)."""
        return server_argv(self.binary, self.model, self.arm_argv, socket=self.socket_arg,
                           parallel=self.parallel, offline=self.offline)

    def command(self) -> list[str]:
        """What is executed: ``argv`` in the node's sandbox, the binary, model and other
        files it reads bound read-only, its socket's folder writable."""
        assert self._socket_dir is not None
        if not self.sandboxed:
            return self.argv
        model = Path(self.model).resolve()
        # A split GGUF's shards lie beside its first, where llama-server opens them.
        shards = [model.with_name(name) for name in split_shards(model.name)]
        reads = [Path(self.binary).resolve(), *shards, *self.reads]
        return self.sandbox.command(self.argv, self.env, trusted=self.trusted, read=reads,
                                    moved=[(self._socket_dir, SOCKET_DIR)], gpu=self.gpu)

    def start(self) -> None:
        """Launch the server and wait until /health answers; ``ServerStartError`` if not."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # Short (a socket path has at most 107 bytes) and private to this server.
        self._socket_dir = Path(tempfile.mkdtemp(prefix="specfarm-"))
        try:
            self._launch_and_wait()
        except BaseException:
            self.stop()
            raise

    def _launch_and_wait(self) -> None:
        with self.log_path.open("ab") as log:
            self.log_offset = log.tell()
            log.write(("$ " + " ".join(self.argv) + "\n").encode(errors="replace"))
        launched = time.monotonic()
        self._process = self._popen()
        assert self._process.stdout is not None  # piped
        self._output = OutputToLog(self._process.stdout, self.log_path, self.output_bytes,
                                   self._kill)
        deadline = time.monotonic() + self.startup_timeout
        with contextlib.ExitStack() as closing:
            client: httpx.Client | None = None
            while time.monotonic() < deadline:
                code = self._process.poll()
                if code is not None:
                    self._process = None
                    self._output.finish()  # its last lines, into the log
                    raise self._failed(f"llama-server exited with code {code} while starting")
                if client is None and self._hold_socket():
                    client = closing.enter_context(httpx.Client(
                        transport=self.http_transport(), base_url="http://localhost",
                        timeout=2.0))
                if client is not None and _healthy(client):
                    # The server's own process, inside the sandbox's process tree.
                    self._pid = inner_pid(self._process.pid, self.binary) \
                        if self.sandboxed else self._process.pid
                    self.start_s = time.monotonic() - launched
                    return
                time.sleep(0.1)
        raise self._failed(f"llama-server did not answer /health within "
                           f"{self.startup_timeout:.0f} s", timed_out=True)

    def _hold_socket(self) -> bool:
        """Hold the server's socket once it made one (``HeldSocket``: the farm connects to
        that socket only); False while there is none, ``ServerStartError`` for anything but
        a socket of this worker's user at its name."""
        assert self._socket_dir is not None
        try:
            self._socket = HeldSocket.of(self._socket_dir / SOCKET_NAME,
                                         what="llama-server's socket", error=ServerStartError)
        except FileNotFoundError:
            return False
        except ServerStartError as exc:
            raise self._failed(str(exc)) from None
        return True

    def _kill(self) -> None:
        """Stop the server at once (its output passed its bound)."""
        process = self._process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)

    @contextlib.contextmanager
    def output_bounded(self) -> Iterator[None]:
        """Where a request fails because the server was stopped for its output (``_kill``),
        the error says so."""
        try:
            yield
        except BenchmarkError as exc:
            if self._output is None or not self._output.over:
                raise
            raise BenchmarkError(self._output.why()) from exc

    def _popen(self) -> subprocess.Popen[bytes]:
        """Start the process; a command line or binary that cannot start is the job's
        fault (``config``), never an exception that leaves a job running."""
        if self.sandboxed and not os.access(self.binary, os.X_OK):
            # Inside, bubblewrap would only exit 1 saying so: the same error as without it.
            raise ProcessNotStarted(f"llama-server {self.binary} could not be started: "
                                    f"{os.strerror(errno.EACCES)}")
        try:
            return subprocess.Popen(
                self.command(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True, env=self.env,
                # Only a prctl call on an already loaded libc: safe between fork and exec.
                preexec_fn=_die_with_parent)
        except ValueError as exc:  # e.g. a NUL byte in an argument
            raise ProcessNotStarted(f"llama-server could not be started: {exc}") from exc
        except OSError as exc:
            if exc.errno in _NOT_STARTABLE:
                raise ProcessNotStarted(f"llama-server {self.binary} could not be started: "
                                        f"{exc.strerror}") from exc
            raise server_log.start_error(f"llama-server could not be started: {exc.strerror}",
                                         "") from exc

    def _failed(self, message: str, tail: str | None = None, *,
                timed_out: bool = False) -> ServerStartError:
        """The start failure, its log's failure lines, and where the whole log is."""
        if self._output is not None and self._output.over:
            message = self._output.why()  # it names the log
        else:
            message = f"{message} (server log: {self.log_path})"
        return server_log.start_error(
            message, server_log.tail(self.log_path) if tail is None else tail,
            timed_out=timed_out)

    def stop(self, grace: float = 10.0) -> None:
        """Terminate the server, then kill its process group if it lingers; its socket's
        folder goes with it."""
        process, self._process, self._pid = self._process, None, None
        if process is not None and process.poll() is None:
            # bubblewrap passes no signal on: the server's own process gets SIGTERM, and
            # the sandbox ends with it.
            target = inner_pid(process.pid, self.binary) if self.sandboxed else process.pid
            try:
                if target == process.pid:
                    os.killpg(process.pid, signal.SIGTERM)
                else:
                    os.kill(target, signal.SIGTERM)
                process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
            except ProcessLookupError:
                pass
        if self._output is not None:
            self._output.finish()
        if self._socket is not None:
            self._socket.close()
            self._socket = None
        if self._socket_dir is not None:
            # The server wrote there: whatever modes it left, nothing stays behind.
            with contextlib.suppress(OSError):
                remove_folder(self._socket_dir)
            self._socket_dir = None

    @property
    def pid(self) -> int | None:
        """The running server's own pid (inside the sandbox's tree; telemetry reads it),
        None when stopped."""
        return self._pid
