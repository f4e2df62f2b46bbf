"""A llama-server's output, copied by the farm from its pipe to its log, to a bound.

The server's code is a commit's: it may print without end. Its stdout and stderr are one
pipe that a thread of the worker copies into the server's log, at most a stated number of
bytes per start; past it the server is stopped (an honest one prints far less) and the
rest of what comes is dropped. The log stays the farm's own file, written by the farm.
"""

from __future__ import annotations

import os
import select
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

_CHUNK = 64 << 10
# How long ``finish`` waits for the pipe's end (the server's last lines) before it stops
# copying: a process the server left behind may hold the pipe open.
_DRAIN_SECONDS = 2.0
_POLL_SECONDS = 0.2


class OutputToLog:
    """Copies ``pipe`` to the end of ``log`` until it ends, ``most`` bytes at most; past
    them ``over`` is set, a line saying so ends the log and ``stop`` is called."""

    def __init__(self, pipe: IO[bytes], log: Path, most: int, stop: Callable[[], None]) -> None:
        self._pipe, self._log, self._most, self._stop = pipe, log, most, stop
        self.over = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._copy, name="server-output", daemon=True)
        self._thread.start()

    def why(self) -> str:
        """What a job's error says when the server was stopped for its output."""
        return (f"llama-server printed over {self._most} bytes, the farm's bound for this "
                f"server's output, and was stopped (server log: {self._log})")

    def _copy(self) -> None:
        source, written = self._pipe.fileno(), 0
        with self._log.open("ab", buffering=0) as log:
            while not self._done.is_set():
                if not select.select([source], [], [], _POLL_SECONDS)[0]:
                    continue
                chunk = os.read(source, _CHUNK)
                if not chunk:
                    return
                if self.over:
                    continue  # dropped: read only so that the server never blocks on it
                room = self._most - written
                log.write(chunk[:room])
                written += min(room, len(chunk))
                if len(chunk) > room:
                    self.over = True
                    log.write(f"\n[the farm stopped the server here: it printed over "
                              f"{self._most} bytes]\n".encode())
                    self._stop()

    def finish(self) -> None:
        """Wait for the pipe's end (the server has exited), then stop copying."""
        self._thread.join(_DRAIN_SECONDS)
        self._done.set()
        self._thread.join()
        self._pipe.close()
