"""Control-plane bench at fleet scale (a script, not a test): N real `farm worker`
processes on real PostgreSQL and a private Redis, with a null engine
(tests/bench/null_worker.py: a job sleeps for its block time and writes synthetic runs
under its lease; every other part is the farm's own), and 10,000 jobs queued by `farm
submit`.

For each N (10, 50, 100 by default; an N this machine's memory cannot hold is skipped,
and said), it starts the workers with the deployment's settings (lease 300 s), waits for
them to register, then measures an idle window (no job) and a busy window (10,000 jobs
queued, every worker claiming), and prints:

* PostgreSQL connections held (peak), target <= N + 10 (-1: PostgreSQL refused more,
  its ``max_connections`` reached);
* PostgreSQL CPU seconds per minute (idle, busy), target < 3 s/min (5% of a core) idle;
* claim latency p50/p99 (the claim transaction, in the worker), target p99 < 1 s, and the
  p99 of the claims begun after `farm submit` returned (the first messages' claims wait
  for the submit's transaction);
* Redis commands per second (idle, busy);
* reconciliation time per worker (p50, p99) and how many reconciliations read a queue
  whole (LRANGE), target none while idle;
* the workers' own CPU seconds per minute (idle, busy), all N together.

Then each figure against N with a fitted power law (log y = a + b log N, by least squares)
and its 95% interval, extrapolated to 100 and 500 workers. It asserts nothing about
speed; it exits non-zero only when a worker or command fails.

    .venv/bin/python -m tests.bench.bench_fleet_workers [--workers 10 50 100] [--idle 120]
        [--busy 60]    (from the checkout)
"""

from __future__ import annotations

import argparse
import math
import os
import re
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
import redis
import yaml
from sqlalchemy.engine import make_url

from farm.settings import load_settings
from farm.stats.distributions import student_t_quantile
from tests.bench.bench_fleet_scale import BENCH_CLASS, BENCH_MODEL_FILE, submit_matrix
from tests.beside import descendants
from workers.paths import NodePaths
from workers.setup.provision import fetch_smollm2, provision

FARM = Path(sys.executable).with_name("farm")
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class Figures:
    """One N's measurements."""

    n: int
    connections_peak: int = 0
    pg_cpu_idle: float = 0.0  # CPU seconds per minute
    pg_cpu_busy: float = 0.0
    redis_idle: float = 0.0  # commands per second
    redis_busy: float = 0.0
    workers_cpu_idle: float = 0.0
    workers_cpu_busy: float = 0.0
    claims: list[float] = field(default_factory=list)
    # Those begun after `farm submit` returned: its transaction holds every row it posts
    # until its messages are sent, and the claims of the first messages wait for it.
    claims_after_submit: list[float] = field(default_factory=list)
    reconciles: list[float] = field(default_factory=list)
    queue_reads_idle: int = 0
    jobs_done: int = 0
    rss_mb: float = 0.0  # one worker's main process and pool child


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds (user + system) of these processes so far."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].split()
        except (OSError, IndexError):
            continue
        total += int(fields[11]) + int(fields[12])
    return total / TICKS


def _named(name: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "comm").read_text().strip() == name:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def _tree(pids: list[int]) -> list[int]:
    return [*pids, *(child for pid in pids for child in descendants(pid))]


def _rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
        total += int(match[1]) if match else 0
    return total / 1024


def _available_mb() -> float:
    match = re.search(r"^MemAvailable:\s+(\d+) kB", Path("/proc/meminfo").read_text(),
                      re.MULTILINE)
    return int(match[1]) / 1024 if match else 0.0


@contextmanager
def private_redis(folder: Path) -> Iterator[str]:
    """A redis-server of this bench's own on a free port (its command counts are ours)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                               "--save", "", "--appendonly", "no", "--dir", str(folder)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        for _ in range(100):
            try:
                redis.Redis.from_url(url).ping()
                break
            except redis.exceptions.ConnectionError:
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        server.wait()


@dataclass
class Fleet:
    """The bench's services and files for one N."""

    db_url: str
    redis_url: str
    root: Path
    server: Path
    db_name: str
    workers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {**os.environ, "FARM_DATABASE_URL": self.db_url, "FARM_BROKER_URL": self.redis_url,
                "FARM_DATA_DIR": str(self.root / "data"), "FARM_LEASE_SECONDS": "300",
                "NULL_WORKER_LOG": str(self.root / "log"), "NULL_BLOCK_SECONDS": "2"}

    def farm(self, *args: str) -> str:
        done = subprocess.run([str(FARM), *args], env=self.env(), capture_output=True,
                              text=True, check=False, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"farm {' '.join(args)}: {done.stderr[-2000:]}")
        return done.stdout

    def start(self, n: int) -> None:
        models = self.root / "models"
        models.mkdir()
        (models / BENCH_MODEL_FILE).symlink_to(fetch_smollm2(NodePaths.of(load_settings())))
        (self.root / "log").mkdir()
        for index in range(n):
            config = self.root / f"w{index}.yaml"
            config.write_text(yaml.safe_dump({
                "name": f"null-{index}", "gpu-class": BENCH_CLASS, "models-dir": str(models),
                "builds": {"cpu": str(self.server)}}))
            log = (self.root / f"w{index}.log").open("wb")
            self.workers.append(subprocess.Popen(
                [sys.executable, "-m", "tests.bench.null_worker", "worker", "--config",
                 str(config)], env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=Path(__file__).resolve().parents[2]))

    def registered(self) -> int:
        with psycopg.connect(self.db_url) as conn:
            row = conn.execute("SELECT count(*) FROM worker WHERE stopped_at IS NULL").fetchone()
        return int(row[0]) if row else 0

    def connections(self) -> int:
        """Connections held to the bench's database; -1 when PostgreSQL refuses one more
        (``max_connections`` reached: the fleet's claims, beats and writes fail then)."""
        try:
            with psycopg.connect(self.db_url) as conn:
                row = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s",
                                   (self.db_name,)).fetchone()
        except psycopg.OperationalError as exc:
            if "too many clients" in str(exc):
                return -1
            raise
        return int(row[0]) - 1 if row else 0  # not this one

    def done(self) -> int:
        with psycopg.connect(self.db_url) as conn:
            row = conn.execute("SELECT count(*) FROM job WHERE state = 'done'").fetchone()
        return int(row[0]) if row else 0

    def stop(self) -> None:
        for process in self.workers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.workers:
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        for process in self.workers:
            if process.returncode not in (0, -signal.SIGTERM):
                print(f"  a worker exited {process.returncode}", flush=True)


def _window(fleet: Fleet, seconds: float) -> tuple[float, float, float, int]:
    """PostgreSQL and worker CPU seconds per minute, Redis commands per second, and the
    peak connections over ``seconds``."""
    client = redis.Redis.from_url(fleet.redis_url)
    workers = _tree([process.pid for process in fleet.workers])
    pg_before, workers_before = _cpu_of(_named("postgres")), _cpu_of(workers)
    commands_before = int(client.info("stats")["total_commands_processed"])
    peak, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        held = fleet.connections()
        peak = -1 if held < 0 or peak < 0 else max(peak, held)
        time.sleep(0.5)
    per_minute = 60 / seconds
    pg = (_cpu_of(_named("postgres")) - pg_before) * per_minute
    own = (_cpu_of(workers) - workers_before) * per_minute
    commands = (int(client.info("stats")["total_commands_processed"]) - commands_before)
    return pg, own, commands / seconds, peak


def _read_log(folder: Path, kind: str) -> list[tuple[float, str]]:
    found = []
    for path in folder.glob(f"{kind}-*.txt"):
        for line in path.read_text().splitlines():
            value, _, extra = line.partition(" ")
            found.append((float(value), extra))
    return found


def measure(n: int, admin_url: str, server: Path, windows: tuple[float, float]) -> Figures:
    """Start N workers, measure idle then busy, stop them."""
    name = f"specfarm_workers_{secrets.token_hex(4)}"
    db_url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    root = Path(tempfile.mkdtemp(prefix="specfarm-workers-"))
    figures = Figures(n)
    try:
        with private_redis(root) as redis_url:
            fleet = Fleet(db_url, redis_url, root, server, name)
            fleet.farm("db", "upgrade")
            started = time.monotonic()
            fleet.start(n)
            try:
                while fleet.registered() < n:
                    if any(process.poll() is not None for process in fleet.workers):
                        raise RuntimeError(f"a worker exited; see {root}/w*.log")
                    time.sleep(1)
                print(f"N={n}: {n} workers registered in {time.monotonic() - started:.0f} s",
                      flush=True)
                time.sleep(10)  # their start-up work done
                figures.rss_mb = _rss_mb(_tree([fleet.workers[0].pid]))
                reads_before = len([x for x in _read_log(root / "log", "queue-read")
                                    if x[1] != "0"])
                (figures.pg_cpu_idle, figures.workers_cpu_idle, figures.redis_idle,
                 idle_peak) = _window(fleet, windows[0])
                figures.queue_reads_idle = len([x for x in _read_log(root / "log", "queue-read")
                                                if x[1] != "0"]) - reads_before
                matrix = root / "matrix.yaml"
                matrix.write_text(yaml.safe_dump(submit_matrix(), sort_keys=False))
                fleet.farm("submit", str(matrix))
                submitted = time.time()
                (figures.pg_cpu_busy, figures.workers_cpu_busy, figures.redis_busy,
                 busy_peak) = _window(fleet, windows[1])
                figures.connections_peak = max(idle_peak, busy_peak)
                figures.jobs_done = fleet.done()
            finally:
                fleet.stop()
            claims = _read_log(root / "log", "claim")
            figures.claims = [value for value, _ in claims]
            figures.claims_after_submit = [value for value, began in claims
                                           if float(began) >= submitted]
            figures.reconciles = [value for value, _ in _read_log(root / "log", "reconcile")]
    finally:
        shutil.rmtree(root, ignore_errors=True)
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return figures


def _quantile(values: list[float], q: float) -> float:
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _rows(figures: Figures) -> dict[str, float]:
    return {
        "PostgreSQL connections (peak)": figures.connections_peak,
        "PostgreSQL CPU s/min, idle": figures.pg_cpu_idle,
        "PostgreSQL CPU s/min, busy": figures.pg_cpu_busy,
        "claim p50 ms": 1000 * _quantile(figures.claims, 0.5),
        "claim p99 ms": 1000 * _quantile(figures.claims, 0.99),
        "claim p99 ms, after submit": 1000 * _quantile(figures.claims_after_submit, 0.99),
        "Redis commands/s, idle": figures.redis_idle,
        "Redis commands/s, busy": figures.redis_busy,
        "reconcile p50 ms": 1000 * _quantile(figures.reconciles, 0.5),
        "reconcile p99 ms": 1000 * _quantile(figures.reconciles, 0.99),
        "queue reads while idle": figures.queue_reads_idle,
        "workers' CPU s/min, idle": figures.workers_cpu_idle,
        "workers' CPU s/min, busy": figures.workers_cpu_busy,
        "jobs done in the busy window": figures.jobs_done,
        "one worker's RSS MB": figures.rss_mb,
    }


def _fit(ns: list[int], values: list[float], at: int) -> str:
    """log y = a + b log N by least squares: b, and the prediction at ``at`` with its 95%
    interval (t with n - 2 degrees of freedom; none with two points)."""
    points = [(math.log(n), math.log(v)) for n, v in zip(ns, values, strict=True) if v > 0]
    if len(points) < 2:
        return "-"
    xs, ys = zip(*points, strict=True)
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    intercept = mean_y - slope * mean_x
    x0 = math.log(at)
    predicted = math.exp(intercept + slope * x0)
    if len(points) < 3:
        return f"N^{slope:.2f}: {predicted:.3g}"
    residual = sum((y - intercept - slope * x) ** 2 for x, y in points) / (len(points) - 2)
    spread = math.sqrt(residual * (1 + 1 / len(points) + (x0 - mean_x) ** 2 / sxx))
    t = student_t_quantile(0.975, len(points) - 2)
    low, high = predicted * math.exp(-t * spread), predicted * math.exp(t * spread)
    return f"N^{slope:.2f}: {predicted:.3g} [{low:.3g}, {high:.3g}]"


def report(measured: list[Figures]) -> None:
    ns = [figures.n for figures in measured]
    rows = [_rows(figures) for figures in measured]
    print(f"\n{'figure':<32}" + "".join(f"{'N=' + str(n):>10}" for n in ns)
          + "   fit: at 100; at 500")
    for name in rows[0]:
        values = [row[name] for row in rows]
        cells = "".join(f"{value:>10.4g}" for value in values)
        print(f"{name:<32}{cells}   {_fit(ns, values, 100)}; {_fit(ns, values, 500)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--idle", type=float, default=120.0, help="idle window, seconds")
    parser.add_argument("--busy", type=float, default=60.0, help="busy window, seconds")
    args = parser.parse_args(argv)
    server = provision(NodePaths.of(load_settings())).server
    print(f"{os.cpu_count()} CPUs, {_available_mb():.0f} MB available; idle window "
          f"{args.idle:.0f} s, busy window {args.busy:.0f} s", flush=True)
    measured: list[Figures] = []
    per_worker = 0.0
    for n in args.workers:
        if per_worker and n * per_worker * 1.3 > _available_mb():
            print(f"N={n}: skipped: {n} workers of {per_worker:.0f} MB each do not fit in "
                  f"{_available_mb():.0f} MB", flush=True)
            continue
        figures = measure(n, args.pg_url, server, (args.idle, args.busy))
        per_worker = max(per_worker, figures.rss_mb)
        measured.append(figures)
        report(measured)
    return 0


if __name__ == "__main__":
    sys.exit(main())
