"""One step of a build (cmake's configure, the compile and link): run in the node's sandbox,
bounded in time and in what it writes, its output to the build's log.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from farm.errors import BuildFailed, BuildUnavailable
from workers.job.runtime.sandbox import Sandbox

# Lines of a failed compile step kept for the job's error: the compiler's message.
TAIL_LINES = 30


def say(message: str) -> None:
    """One line of a build's progress, on stderr."""
    print(f"[build] {message}", file=sys.stderr, flush=True)


def compile_step(argv: list[str], env: dict[str, str], what: str, log: Path, *,
                 sandbox: Sandbox, trusted: bool = False, read: Sequence[Path] = (),
                 write: Sequence[Path] = (), placed: Sequence[tuple[Path, str]] = (),
                 moved: Sequence[tuple[Path, str]] = (), bound: Path | None = None) -> None:
    """Run a configure or compile step in ``sandbox`` (``Sandbox.wraps``; ``read`` bound
    read-only, ``write`` writable, ``placed`` and ``moved`` the same at another path
    inside: ``Sandbox.command``), its output to ``log`` and, on a terminal, one status
    line that rewrites itself; a failure is BuildFailed with the step's last lines (the
    compiler's error), or BuildUnavailable when the disk is full (another node, or later,
    may build it). It is killed past STEP_SECONDS, and when ``bound`` (its build folder)
    holds over BUILD_BYTES."""
    say("$ " + " ".join(argv))
    tail: deque[str] = deque(maxlen=TAIL_LINES)
    status = sys.stderr.isatty()
    lines = 0
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as out, subprocess.Popen(
                sandbox.command(argv, env, trusted=trusted, read=read, write=write,
                                placed=placed, moved=moved), env=env,
                text=True,
                errors="replace", stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
                preexec_fn=_bounded_files) as process:
            assert process.stdout is not None  # piped above
            out.write("$ " + " ".join(argv) + "\n")
            with _Watch(process, bound) as watch:
                for line in process.stdout:
                    out.write(line)
                    tail.append(line.rstrip())
                    lines += 1
                    if status:
                        sys.stderr.write(f"\r\033[K[build] {what}: {line.strip()[:70]}")
        code = process.returncode
    except FileNotFoundError as exc:
        raise BuildUnavailable(f"{argv[0]} is not installed on this node: {exc}") from exc
    except OSError as exc:
        raise BuildUnavailable(f"{what}: {exc}") from exc
    if status:
        sys.stderr.write("\r\033[K")
    if watch.stopped:
        raise BuildFailed(f"{what} was stopped: {watch.stopped} (log: {log})")
    if code != 0:
        text = "\n".join(tail)
        if "No space left on device" in text:
            raise BuildUnavailable(f"{what}: no space left on device (log: {log})\n{text}")
        if code < 0 or code in _KILLED or "Killed signal terminated program" in text:
            # Out of memory, or stopped from outside: this node's failure, not the code's.
            raise BuildUnavailable(f"{what} was killed (exit {code}: out of memory on this "
                                   f"node, or stopped; log: {log})\n{text}")
        raise BuildFailed(f"{what} failed (exit {code}); its last lines (all in {log}):\n{text}")
    say(f"{what}: done, {lines} lines in {log}")


# A build step's bounds: its time, the most its build folder may hold, and the largest
# file it may write (RLIMIT_FSIZE: the kernel stops the writer). A CUDA build of every
# architecture writes a few GB; a step past these is a build gone wrong, or a hostile one.
STEP_SECONDS = 3 * 3600
# A step's exit when a signal killed it (bubblewrap and shells exit 128 + the signal):
# SIGKILL (the kernel's OOM killer), SIGTERM.
_KILLED = (128 + 9, 128 + 15)
BUILD_BYTES = 32 << 30
FILE_BYTES = 8 << 30
_WATCH_EVERY = 5.0


def _bounded_files() -> None:
    """In the build step's child before exec: no file over FILE_BYTES."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_BYTES, FILE_BYTES))


def _size(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


class _Watch:
    """Kills a build step's process group past STEP_SECONDS or when its build folder holds
    over BUILD_BYTES; ``stopped`` says why."""

    def __init__(self, process: subprocess.Popen[str], bound: Path | None) -> None:
        self.process, self.bound = process, bound
        self.stopped = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="build-watch", daemon=True)

    def _loop(self) -> None:
        deadline = time.monotonic() + STEP_SECONDS
        while not self._done.wait(_WATCH_EVERY):
            if time.monotonic() > deadline:
                self._stop(f"it ran past {STEP_SECONDS} s")
            elif self.bound is not None and _size(self.bound) > BUILD_BYTES:
                self._stop(f"its build folder holds over {BUILD_BYTES >> 30} GiB")

    def _stop(self, why: str) -> None:
        self.stopped = why
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
