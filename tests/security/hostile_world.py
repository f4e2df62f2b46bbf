"""The worker's side of tests/security/test_hostile_commit.py: the listeners the hostile
commit tries to reach, the places it goes for (``World``), `farm run` as a worker runs it
with its peak RSS read, the runs and jobs it stored, and the daemons its servers leave."""

from __future__ import annotations

import os
import re
import signal
import socketserver
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from farm.store.db import make_engine
from farm.store.models import Campaign, Job, Run
from tests.security.hostile_plant import daemons

FARM = str(Path(sys.executable).with_name("farm"))


@dataclass
class Listener:
    """A TCP listener on 127.0.0.1, or a UNIX one: every connection's bytes (an HTTP
    request is answered 200 and closed, so a download ends at once)."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> list[bytes]:
        """What connections brought since the last take."""
        with self.lock:
            taken, self.received[:] = list(self.received), []
        return taken


def serve(listener: Listener, unix: Path | None = None) -> socketserver.BaseServer:
    """Serve ``listener`` on 127.0.0.1, or at the UNIX socket ``unix``."""
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            data = b""
            self.request.settimeout(5)
            try:
                while chunk := self.request.recv(65536):
                    data += chunk
                    if b"\r\n\r\n" in data:
                        self.request.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok")
                        break
            except OSError:
                pass
            with listener.lock:
                listener.received.append(data)

    server: socketserver.ThreadingTCPServer | socketserver.ThreadingUnixStreamServer
    if unix is None:
        server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        listener.port = server.server_address[1]
    else:
        server = socketserver.ThreadingUnixStreamServer(str(unix), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@dataclass(frozen=True)
class World:
    """The worker's side the hostile commit goes for, and the commit."""

    root: Path
    home: Path  # the worker's (fake) home
    data: Path  # FARM_DATA_DIR of every test here
    plant: Path  # a folder outside any build dir
    ccache: Path  # the operator's ccache (CCACHE_DIR), which no job's build may write
    caches: dict[str, Path]  # each test's FARM_CACHE_DIR
    tokens: dict[str, str]  # canary name -> its secret value
    listener: Listener
    unix: Listener  # where the swapped socket's link points (``unix_path``)
    repo: Path
    commit: str

    @property
    def unix_path(self) -> Path:
        return self.root / "listener.sock"

    @property
    def config(self) -> Path:
        return self.home / ".config" / "specfarm"

    @property
    def database(self) -> str:
        """`farm run`'s store, named in its environment (a canary too)."""
        return f"sqlite:///{self.data / 'farm.db'}"

    @property
    def url(self) -> str:
        return f"file://{self.repo}"

    def env(self, **extra: str) -> dict[str, str]:
        """The worker's environment: the fake home, the data dir, the secret variable."""
        return {**os.environ, "HOME": str(self.home), "FARM_DATA_DIR": str(self.data),
                "FARM_CANARY_SECRET": self.tokens["env"], **extra}

    def planted(self) -> list[Path]:
        """The files the commit's code wrote outside its build dir."""
        return sorted(path for folder in self.targets for path in folder.glob("planted-*"))

    @property
    def targets(self) -> list[Path]:
        """Where the commit's code tries to write."""
        return [self.plant, self.home, self.ccache, *self.caches.values()]

    def reset(self) -> None:
        """No planted file, nothing received: each test starts from here."""
        for path in self.planted():
            path.unlink()
        self.listener.take()
        self.unix.take()


def kill_daemons() -> list[int]:
    """Kill the planted daemons running now (``hostile_plant.DAEMON``, by pid); their pids."""
    found = daemons()
    for pid in found:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
    return found


def runs_of(database_url: str, campaign: str) -> list[Row[Any]]:
    """The campaign's runs: what the tests read of each, and its job's variant."""
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            return list(session.execute(
                select(Run.arm, Run.build_commit, Run.__table__.c.generated_tokens,
                       Run.__table__.c.decode_tok_s, Run.sandboxed, Run.server_log,
                       Run.worker_name, Job.variant_name)
                .join(Job).join(Campaign).where(Campaign.name == campaign)))
    finally:
        engine.dispose()


@dataclass(frozen=True)
class FarmRun:
    """A `farm run`: how it ended, its seconds, and its process's peak RSS (MiB)."""

    result: subprocess.CompletedProcess[str]
    seconds: float
    peak_mib: float


def peak_mib(pid: int) -> float:
    """The peak RSS of process ``pid`` so far (VmHWM), 0 once it is gone."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.M)
    return int(found[1]) / 1024 if found else 0.0


def farm_run(world: World, matrix: Path, cache: str, **env: str) -> FarmRun:
    """`farm run MATRIX` as a worker would run it (its home, data dir, database URL and
    secret in its environment), built in cache dir ``cache``, its peak RSS read until it
    exits."""
    started = time.monotonic()
    with subprocess.Popen(
            [FARM, "run", str(matrix)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=world.env(FARM_CACHE_DIR=str(world.caches[cache]),
                                     FARM_DATABASE_URL=world.database, **env)) as process:
        peak = [0.0]

        def watch() -> None:
            while process.poll() is None:
                peak[0] = max(peak[0], peak_mib(process.pid))
                time.sleep(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        stdout, stderr = process.communicate(timeout=1800)
        watcher.join()
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    return FarmRun(result, time.monotonic() - started, peak[0])


def jobs_of(database_url: str, campaign: str) -> dict[str, Row[Any]]:
    """The campaign's jobs by variant name: state, error and summary."""
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            return {job.variant_name: job for job in session.execute(
                select(Job.variant_name, Job.state, Job.error, Job.failure_class, Job.summary)
                .join(Campaign).where(Campaign.name == campaign))}
    finally:
        engine.dispose()
