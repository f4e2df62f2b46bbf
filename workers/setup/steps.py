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
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

from farm.errors import BuildFailed, BuildUnavailable
from workers.job.runtime import confine
from workers.job.runtime.sandbox import Sandbox
from workers.job.runtime.untrusted_files import TooDeep, folder_bytes

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
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        # Not through a link a checkout left at the log's name.
        descriptor = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o644)
        with os.fdopen(descriptor, "ab") as out:
            out.write(("$ " + " ".join(argv) + "\n").encode())
            with subprocess.Popen(
                    sandbox.command(argv, env, trusted=trusted, read=read, write=write,
                                    placed=placed, moved=moved), env=env,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL, start_new_session=True,
                    preexec_fn=_bounded_files) as process, _Watch(process, bound) as watch:
                assert process.stdout is not None  # piped above
                lines = _to_log(StepOutput(process.stdout.fileno()), out, tail,
                                what if status else None, watch)
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
        raise _failure(what, code, list(tail), log)
    say(f"{what}: done, {lines} lines in {log}")


def _failure(what: str, code: int, tail: list[str], log: Path) -> BuildFailed | BuildUnavailable:
    """Why a step that exited ``code`` failed: the build's fault (BuildFailed), or this
    node's (BuildUnavailable: another node, or later, may build it). The sandbox's launcher
    (``confine``) says the last word where the failure was its own or its bound's."""
    text, last = "\n".join(tail), (tail or [""])[-1]
    if last.startswith(confine.OUT_OF_MEMORY):
        # Killed in the sandbox's cgroup at its bound: the build asked for more than any
        # build may, wherever it runs.
        return BuildFailed(f"{what} was killed at the sandbox's memory bound ({last}); its "
                           f"last lines (all in {log}):\n{text}")
    if code == confine.NOT_CONFINED and last.startswith(confine.CANNOT_CONFINE):
        return BuildUnavailable(f"{what}: {last} (log: {log})")
    if "No space left on device" in text:
        return BuildUnavailable(f"{what}: no space left on device (log: {log})\n{text}")
    if code < 0 or code in _KILLED or "Killed signal terminated program" in text:
        # Out of memory on this node, or stopped from outside: not the code's failure.
        return BuildUnavailable(f"{what} was killed (exit {code}: out of memory on this "
                                f"node, or stopped; log: {log})\n{text}")
    return BuildFailed(f"{what} failed (exit {code}); its last lines (all in {log}):\n{text}")


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


# A step's output, as the worker reads it: lines cut at LINE_BYTES (the rest counted, and
# said at the line's end in the log, never held), OUTPUT_BYTES in all, past which the step
# is stopped. A CUDA build of every architecture prints a few MB; one endless line, or
# output without end, is a build gone wrong or a hostile one. The log holds at most what
# was read, so each step adds at most OUTPUT_BYTES (and a mark per cut line) to it.
LINE_BYTES = 64 << 10
OUTPUT_BYTES = 64 << 20
CUT_MARK = b" [the farm cut this line here: %d more bytes]"
_READ_BYTES = 64 << 10


class StepOutput:
    """A step's output pipe (its descriptor) read in chunks, as lines of at most
    LINE_BYTES: ``over`` once more than OUTPUT_BYTES came (no more is read)."""

    def __init__(self, pipe: int) -> None:
        self._pipe = pipe
        self.read = 0
        self.over = False

    def lines(self) -> Iterator[tuple[bytes, int]]:
        """Each line (without its newline) cut at LINE_BYTES, and how many bytes of it were
        left out."""
        kept, left_out = bytearray(), 0
        while chunk := os.read(self._pipe, _READ_BYTES):
            self.read += len(chunk)
            start = 0
            while (end := chunk.find(b"\n", start)) != -1:
                left_out += _keep(kept, chunk[start:end])
                yield bytes(kept), left_out
                kept, left_out, start = bytearray(), 0, end + 1
            left_out += _keep(kept, chunk[start:])
            if self.read > OUTPUT_BYTES:
                self.over = True
                break
        if kept or left_out:
            yield bytes(kept), left_out


def _to_log(output: StepOutput, log: IO[bytes], tail: deque[str], status: str | None,
            watch: _Watch) -> int:
    """Write a step's output to its log, its last lines to ``tail``, each to the terminal's
    status line (for the step ``status`` names, where one is shown); stop the step once
    it printed over OUTPUT_BYTES. How many lines it printed."""
    lines = 0
    for raw, left_out in output.lines():
        log.write(raw + (CUT_MARK % left_out if left_out else b"") + b"\n")
        line = raw.decode(errors="replace")
        tail.append(line.rstrip())
        lines += 1
        if status:
            sys.stderr.write(f"\r\033[K[build] {status}: {line.strip()[:70]}")
    if output.over:
        watch.stop(f"it printed over {OUTPUT_BYTES >> 20} MiB")
    return lines


def _keep(kept: bytearray, piece: bytes) -> int:
    """Add to ``kept`` what fits in LINE_BYTES; how many bytes did not."""
    room = max(0, LINE_BYTES - len(kept))
    kept += piece[:room]
    return max(0, len(piece) - room)


def over_bound(folder: Path) -> str:
    """Why a build folder is over its bound (BUILD_BYTES, as ``folder_bytes`` counts it;
    "" while it is not)."""
    try:
        held = folder_bytes(folder)
    except TooDeep as exc:
        return str(exc)
    except OSError as exc:
        return f"the farm cannot measure its build folder ({exc})"
    return f"its build folder holds over {BUILD_BYTES >> 30} GiB" if held > BUILD_BYTES else ""


class _Watch:
    """Kills a build step's process group past STEP_SECONDS or when its build folder holds
    over BUILD_BYTES; ``stopped`` says why."""

    def __init__(self, process: subprocess.Popen[bytes], bound: Path | None) -> None:
        self.process, self.bound = process, bound
        self.stopped = ""
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="build-watch", daemon=True)

    def _loop(self) -> None:
        deadline = time.monotonic() + STEP_SECONDS
        while not self._done.wait(_WATCH_EVERY):
            if time.monotonic() > deadline:
                self.stop(f"it ran past {STEP_SECONDS} s")
            elif self.bound is not None and (why := over_bound(self.bound)):
                self.stop(why)

    def stop(self, why: str) -> None:
        """Kill the step's process group; ``why`` is what its error says."""
        self.stopped = why
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)

    def __enter__(self) -> _Watch:
        self._thread.start()
        return self

    def __exit__(self, failed: type[BaseException] | None, *_: object) -> None:
        self._done.set()
        self._thread.join()
        if failed is not None:
            # The worker stops reading (a time limit, a full disk, its shutdown): the step
            # stops too, not left running unbounded with no reader while Popen waits on it.
            self.stop("the worker stopped reading its output")
