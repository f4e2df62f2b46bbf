"""The rule of tests/run's shared phase: a test that runs beside another (pytest-xdist, two
at a time on two cores) starts llama-server at ``--threads 1`` only. Two servers of two
threads each on two cores spin-wait each other 10-100x slower; tests that need two threads,
or a quiet node, are marked ``alone`` and run after, one at a time.

``Watch`` follows the llama-servers this process starts (its descendants, through Celery
workers and the sandbox), twice a second, and keeps the command line of each that would
run more than one thread.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def _children() -> dict[int, list[int]]:
    """Every process's children, by parent pid (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # The parent pid follows the command name, which may hold spaces: after ") ".
            parent = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(entry.name))
    return children


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its children, theirs, ...), from /proc."""
    children, found, todo = _children(), [], [pid]
    while todo:
        kids = children.get(todo.pop(), [])
        found.extend(kids)
        todo.extend(kids)
    return found


def threads_asked(argv: list[str]) -> int | None:
    """The ``--threads``/``-t`` a llama-server command line gives; None: its default (every
    core)."""
    for index, arg in enumerate(argv):
        if arg.startswith("--threads="):
            return int(arg.split("=", 1)[1])
        if arg in ("--threads", "-t") and index + 1 < len(argv):
            return int(argv[index + 1])
    return None


def serves(argv: list[str]) -> bool:
    """Whether a llama-server command line loads a model (a probe, ``--version`` or
    ``--help``, computes nothing)."""
    return any(arg in ("--model", "-m") or arg.startswith("--model=") for arg in argv)


class Watch:
    """Watches this process's llama-servers from ``start()`` to ``stop()``; ``offending``:
    the command lines of those not at one thread."""

    def __init__(self) -> None:
        self.offending: set[str] = set()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Watch:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stopped.wait(0.5):
            for pid in descendants(os.getpid()):
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
                except OSError:
                    continue
                if (argv and Path(argv[0]).name == "llama-server" and serves(argv)
                        and threads_asked(argv) != 1):
                    self.offending.add(" ".join(argv))
