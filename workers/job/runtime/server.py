"""Start and stop one ``llama-server`` process: argv only, loopback, own process group."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx

from farm.errors import ProcessNotStarted, ServerStartError
from workers.job.runtime import server_log

HOST = "127.0.0.1"
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


def child_env(extra: dict[str, str] | None) -> dict[str, str]:
    """The allow-listed part of this process's environment, plus ``extra`` (the farm's own,
    e.g. ``CUDA_VISIBLE_DEVICES``)."""
    inherited = {name: value for name, value in os.environ.items()
                 if name in _INHERITED or name.startswith(_INHERITED_PREFIXES)}
    return {**inherited, **(extra or {})}


def free_port() -> int:
    """A port the kernel just handed out; the server may still lose a race for it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def server_argv(binary: str, model: str, arm_argv: Sequence[str], *, port: int | str,
                parallel: int, offline: bool) -> list[str]:
    """An arm's server command line: the farm's own flags, then the arm's (``farm run
    --dry-run`` prints it with the port as ``PORT``)."""
    return [binary, "--model", model, "--host", HOST, "--port", str(port),
            "--log-verbosity", str(LOG_VERBOSITY), "--parallel", str(parallel),
            "--metrics", *(["--offline"] if offline else []), *arm_argv]


class LlamaServer:
    """One server process for one arm. Use as a context manager: it always stops."""

    def __init__(self, binary: str, model: str, arm_argv: list[str], log_path: Path,
                 *, parallel: int = 1, startup_timeout: float = 180.0, bind_attempts: int = 5,
                 env: dict[str, str] | None = None, offline: bool = True) -> None:
        self.binary, self.model, self.arm_argv = binary, model, arm_argv
        self.parallel = parallel  # slots: one per simultaneous stream
        self.offline = offline  # --offline, where the build knows it
        self.env = child_env(env)
        self.log_path = log_path
        self.startup_timeout = startup_timeout
        self.bind_attempts = bind_attempts
        self.port = 0
        self.log_offset = 0  # where the running server's output begins in its log
        self._process: subprocess.Popen[bytes] | None = None

    def log_text(self) -> str:
        """What the running server has logged so far (not an earlier start's output)."""
        with self.log_path.open("rb") as log:
            log.seek(self.log_offset)
            return log.read().decode(errors="replace")

    @property
    def base_url(self) -> str:
        """Where the started server answers HTTP."""
        return f"http://{HOST}:{self.port}"

    def argv(self, port: int) -> list[str]:
        """The full command line (``server_argv``)."""
        return server_argv(self.binary, self.model, self.arm_argv, port=port,
                           parallel=self.parallel, offline=self.offline)

    def __enter__(self) -> LlamaServer:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Launch the server and wait until /health answers; ``ServerStartError`` if not."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(self.bind_attempts):
            self.port = free_port()
            if self._launch_and_wait():
                return
        raise self._failed(f"llama-server could not bind a port after {self.bind_attempts} "
                           "attempts")

    def _launch_and_wait(self) -> bool:
        """True once healthy; False on a lost port race; raises on any other failure."""
        with self.log_path.open("ab") as log:
            self.log_offset = log.tell()
            log.write(("$ " + " ".join(self.argv(self.port)) + "\n").encode(errors="replace"))
            log.flush()
            self._process = self._popen(log)
        deadline = time.monotonic() + self.startup_timeout
        with httpx.Client(timeout=2.0) as client:
            while time.monotonic() < deadline:
                code = self._process.poll()
                if code is not None:
                    return self._exited(code)
                try:
                    if client.get(f"{self.base_url}/health").status_code == 200:
                        return True
                except httpx.TransportError:
                    pass
                time.sleep(0.1)
        self.stop()
        raise self._failed(f"llama-server did not answer /health within "
                           f"{self.startup_timeout:.0f} s", timed_out=True)

    def _popen(self, log: IO[bytes]) -> subprocess.Popen[bytes]:
        """Start the process; a command line or binary that cannot start is the job's
        fault (``config``), never an exception that leaves a job running."""
        try:
            return subprocess.Popen(
                self.argv(self.port), stdin=subprocess.DEVNULL, stdout=log,
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

    def _exited(self, code: int) -> bool:
        self._process = None
        tail = server_log.tail(self.log_path)
        if server_log.lost_port_race(tail):
            return False
        raise self._failed(f"llama-server exited with code {code} while starting", tail)

    def _failed(self, message: str, tail: str | None = None, *,
                timed_out: bool = False) -> ServerStartError:
        """The start failure, its log's failure lines, and where the whole log is."""
        return server_log.start_error(
            f"{message} (server log: {self.log_path})",
            server_log.tail(self.log_path) if tail is None else tail, timed_out=timed_out)

    def stop(self, grace: float = 10.0) -> None:
        """Terminate the whole process group, then kill it if it lingers."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        except ProcessLookupError:
            pass

    @property
    def pid(self) -> int | None:
        """The running server's pid (also its process group), None when stopped."""
        return self._process.pid if self._process else None
