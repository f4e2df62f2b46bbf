"""Fleet scale benchmark (a script, not a test): a 1,000,000-run store, timed CLI commands.

Fills a fresh PostgreSQL database with 10 campaigns x 1,000 jobs x 100 runs (COPY) and
gives each job the summary a worker writes when it finishes (``farm.results.finish``: its
statistics and the facts reports would otherwise read from its runs; about 5 minutes on
two cores), then times cold ``farm`` processes against it:

* ``farm submit`` of a 10,000-job matrix (validate, store, enqueue to Redis), target < 5 s,
  then the same submit again: it finds every message waiting and posts none (the queue
  holds no more messages than pending jobs)
* ``farm report CAMPAIGN --format json`` of one 100,000-run campaign, target < 1 s
* ``farm report --all --format json`` (every campaign, 20,000 jobs), target < 1 s
* ``farm status CAMPAIGN`` (no target)

Each report runs first once as the first after the fill, which works every row out, keeps
it with its job and keeps the whole report (``farm.results.printed``; no target), then
``--repeat`` times printing the kept report as it is.

It prints the figures and asserts nothing about speed: it exits 0 on a MISS and non-zero
only when a command fails or returns the wrong thing.

    .venv/bin/python tests/bench/bench_fleet_scale.py [--pg-url URL] [--redis-url URL]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import multiprocessing
import os
import random
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import redis
import yaml
from sqlalchemy import bindparam, update
from sqlalchemy.engine import make_url

from farm.results.finish import job_summary_values
from farm.results.rows import run_facts
from farm.results.runs import job_runs
from farm.stats.design import Design
from farm.store import registry
from farm.store.db import make_engine
from farm.store.models import Job

CAMPAIGNS = 10
JOBS_PER_CAMPAIGN = 1_000
PROMPTS = 5
REPETITIONS = 10  # per prompt and arm, in the submitted matrix
# A fill job ran 5 block pairs (AB, BA, ...) of 2 repetitions per prompt and arm.
FILL_PAIRS, FILL_REPETITIONS = 5, 2
RUNS_PER_JOB = 2 * FILL_PAIRS * PROMPTS * FILL_REPETITIONS
SUBMIT_JOBS = 10_000
BENCH_CLASS = "bench"
BENCH_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FILL_MODEL_FILE = "Qwen3-8B-Q4_K_M.gguf"
FARM = Path(sys.executable).with_name("farm")

RUN_COLUMNS = (
    "job_id, arm, arm_name, block, pair, position, prompt_id, prompt_category, repetition, "
    "prompt_tokens, generated_tokens, prompt_tok_s, decode_tok_s, client_decode_tok_s, "
    "ttft_ms, e2e_ms, tpot_ms, draft_n, draft_accepted, spec_drafts, spec_drafted, "
    "spec_accepted, spec_accepted_per_pos, text, server_version, build_name, model_file, "
    "model_size, model_sha256, host, argv, server_log, worker_name, attempt, started_at")
JOB_COLUMNS = (
    "id, campaign_id, job_key, model_name, build_name, variant_name, varying, spec, gpu_class, "
    "state, attempt, max_attempts, error, lease_owner, lease_expires_at, task_id, posted_at, "
    "started_at, finished_at")

PROMPT_TEXTS = [
    ("copy-text", "rewrite", "Repeat the following text exactly, word for word: The quick "
     "brown fox jumps over the lazy dog. A journey of a thousand miles begins with a step."),
    ("code-edit", "code", "Rename the variable x to count in this function and return the "
     "whole function: def f(items):\n    x = 0\n    for i in items:\n        x += i\n"
     "    return x"),
    ("summary", "summarise", "Summarise in two sentences: speculative decoding drafts tokens "
     "cheaply and verifies them in one batch with the target model."),
    ("qa", "qa", "What is the capital of France, and on which river does it stand?"),
    ("list", "general", "List the planets of the solar system in order from the sun."),
]
OUTPUT_TEXT = ("The quick brown fox jumps over the lazy dog. A journey of a thousand miles "
               "begins with a single step. All that glitters is not gold. Actions speak "
               "louder than words.")


@dataclass
class Figure:
    name: str
    seconds: float
    target: float | None
    detail: str = ""


@dataclass
class Bench:
    admin_url: str
    db_url: str
    redis_url: str
    workdir: Path
    figures: list[Figure] = field(default_factory=list)

    def env(self) -> dict[str, str]:
        return {**os.environ, "FARM_DATABASE_URL": self.db_url,
                "FARM_BROKER_URL": self.redis_url, "FARM_DATA_DIR": str(self.workdir / "data")}


class BenchFailure(Exception):
    """A command failed or returned the wrong thing (not a missed target)."""


# --- matrices and fill jobs -------------------------------------------------------------


def _prompts() -> list[dict[str, str]]:
    return [{"id": pid, "category": category, "text": text}
            for pid, category, text in PROMPT_TEXTS]


def submit_matrix() -> dict[str, Any]:
    """100 baseline context sizes x 100 draft lengths = 10,000 jobs on the bench class."""
    return {
        "campaign": "bench-submit",
        "gpu-classes": [BENCH_CLASS],
        "build": "cpu",
        "models": [{"name": "smollm2-135m", "file": BENCH_MODEL_FILE}],
        "prompts": _prompts(),
        "n-predict": 32,
        "repetitions": REPETITIONS,
        "flags": {"ctx-size": [1024 + 16 * i for i in range(100)], "threads": 1},
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple",
                                                 "spec-draft-n-max": list(range(1, 101))}}],
    }


def write_matrix(path: Path, matrix: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(matrix, sort_keys=False), encoding="utf-8")
    return path


@dataclass(frozen=True)
class FillJob:
    """One stored job of a fill campaign: 2 classes x 5 context sizes x 100 draft lengths.

    Built here rather than through ``farm.matrix`` so that the fill does not follow every
    change of ``JobSpec``; ``spec`` has the shape and size of a stored one.
    """

    campaign: str
    gpu_class: str
    ctx_size: int
    n_max: int

    @property
    def variant_name(self) -> str:
        return f"ngram[spec-draft-n-max={self.n_max}]"

    def flags(self, role: str) -> list[tuple[str, str]]:
        flags = [("ctx-size", str(self.ctx_size)), ("n-gpu-layers", "99"), ("flash-attn", "on")]
        if role == "variant":
            flags += [("spec-type", "ngram-simple"), ("spec-draft-n-max", str(self.n_max))]
        return flags

    def argv(self, role: str) -> str:
        own = [part for name, value in self.flags(role) for part in (f"--{name}", value)]
        return json.dumps(["/opt/llama/cuda/bin/llama-server", "--model",
                           f"/models/{FILL_MODEL_FILE}", *own, "--host", "127.0.0.1",
                           "--port", "41234", "-np", "1", "--metrics"])

    def varying(self) -> dict[str, str]:
        return {"spec-type": "ngram-simple", "spec-draft-n-max": str(self.n_max),
                "ctx-size": str(self.ctx_size)}

    def spec(self) -> dict[str, Any]:
        build = {"name": "cuda", "path": None}
        return {
            "campaign": self.campaign, "gpu_class": self.gpu_class,
            "model": {"name": "qwen3-8b", "file": FILL_MODEL_FILE, "path": None},
            "baseline": {"role": "baseline", "name": "baseline", "build": build,
                         "flags": self.flags("baseline")},
            "variant": {"role": "variant", "name": self.variant_name, "build": build,
                        "flags": self.flags("variant")},
            "varying": self.varying(), "prompt_mode": "chat", "prompts": _prompts(),
            "n_predict": 128, "sampling": {"temperature": 0.0, "seed": 42},
            "repetitions": FILL_REPETITIONS, "pairs": FILL_PAIRS,
        }


def fill_jobs(campaign: str) -> list[FillJob]:
    return [FillJob(campaign, gpu_class, ctx_size, n_max) for gpu_class in ("h100", "a100")
            for ctx_size in (4096, 8192, 16384, 32768, 65536) for n_max in range(1, 101)]


# --- fill -------------------------------------------------------------------------------


def _run_rows(job_id: int, job: FillJob, start: datetime, worker: str,
              rng: random.Random) -> Iterator[tuple[Any, ...]]:
    """The job's 100 runs: counterbalanced block pairs, each block with its own level."""
    speedup = rng.uniform(1.1, 1.9)
    log_dir = f"/var/lib/specfarm/logs/{job_id:016x}"
    moment = start
    for pair in range(FILL_PAIRS):
        order = ("baseline", "variant") if pair % 2 == 0 else ("variant", "baseline")
        for position, role in enumerate(order):
            block, variant = 2 * pair + position, role == "variant"
            argv, name = job.argv(role), job.variant_name if variant else "baseline"
            level = 100.0 * (speedup if variant else 1.0) * rng.gauss(1.0, 0.01)
            for prompt_id, category, _ in PROMPT_TEXTS:
                for rep in range(FILL_REPETITIONS):
                    tok_s = rng.gauss(level, 3.0)
                    drafted = rng.randint(40, 120) if variant else 0
                    accepted = int(drafted * rng.uniform(0.4, 0.9))
                    moment += timedelta(seconds=1.3)
                    yield (job_id, role, name, block, pair, position, prompt_id, category, rep,
                           rng.randint(30, 60), 128, rng.gauss(2000.0, 50.0), tok_s,
                           tok_s * 0.97, rng.gauss(25.0, 2.0), 128_000.0 / tok_s + 25.0,
                           1000.0 / tok_s, drafted, accepted, drafted // 4 if variant else 0,
                           drafted, accepted,
                           json.dumps([accepted // 2, accepted // 3,
                                       accepted - 5 * accepted // 6]) if variant else "[]",
                           OUTPUT_TEXT, "version: 6500 (1a2b3c4d)", "cuda", FILL_MODEL_FILE,
                           5_027_783_488, "ab" * 32, worker, argv,
                           f"{log_dir}/block{block}-{role}.log", worker, 1, moment)


def _job_row(job_id: int, campaign_id: int, job: FillJob, start: datetime,
             worker: str) -> tuple[Any, ...]:
    spec = json.dumps(job.spec())
    job_key = hashlib.sha256(spec.encode()).hexdigest()
    return (job_id, campaign_id, job_key, "qwen3-8b", "cuda", job.variant_name,
            json.dumps(job.varying()), spec, job.gpu_class, "done", 1, 3, None, worker, None,
            secrets.token_hex(16), start - timedelta(minutes=5), start,
            start + timedelta(seconds=1.3 * RUNS_PER_JOB + 20))


def _fill_campaign(conn: psycopg.Connection[Any], index: int, first_id: int,
                   rng: random.Random) -> int:
    """COPY one campaign's jobs and runs; returns the last job id used."""
    base = datetime(2025, 6, 1, tzinfo=UTC) + timedelta(days=index)
    name = f"bench-fill-{index:02d}"
    row = conn.execute("INSERT INTO campaign (name, matrix_path, created_at) "
                       "VALUES (%s, %s, %s) RETURNING id",
                       (name, f"/srv/matrices/{name}.yaml", base)).fetchone()
    if row is None:
        raise BenchFailure(f"no id for campaign {name}")
    placed = []
    with conn.cursor() as cur, cur.copy(f"COPY job ({JOB_COLUMNS}) FROM STDIN") as copy:
        for n, job in enumerate(fill_jobs(name)):
            job_id, worker = first_id + n, f"gpu-node-{n % 16:02d}-{job.gpu_class}"
            start = base + timedelta(seconds=200 * n)
            copy.write_row(_job_row(job_id, int(row[0]), job, start, worker))
            placed.append((job_id, job, start, worker))
    with conn.cursor() as cur, cur.copy(f"COPY run ({RUN_COLUMNS}) FROM STDIN") as copy:
        for job_id, job, start, worker in placed:
            for run in _run_rows(job_id, job, start, worker, rng):
                copy.write_row(run)
    conn.commit()
    print(f"  filled {name}: {len(placed)} jobs, {len(placed) * RUNS_PER_JOB} runs", flush=True)
    return placed[-1][0]


def fill(bench: Bench) -> None:
    """10 campaigns of 1,000 done jobs with 100 runs each, by COPY; their summaries; then
    VACUUM ANALYZE."""
    rng = random.Random(20250601)
    last_id = 0
    with psycopg.connect(bench.db_url) as conn:
        for index in range(CAMPAIGNS):
            last_id = _fill_campaign(conn, index, last_id + 1, rng)
        conn.execute("SELECT setval(pg_get_serial_sequence('job', 'id'), %s)", (last_id,))
        conn.commit()
    summarize(bench.db_url, range(1, last_id + 1))
    with psycopg.connect(bench.db_url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")


def _summarize_jobs(task: tuple[str, list[int]]) -> int:
    """Each job's summary as a worker computes it when the job finishes (its runs read back,
    ``farm.results.finish.job_summary_values``), written in one statement."""
    db_url, job_ids = task
    engine = make_engine(db_url)
    try:
        values = [{"job_id": job_id, **job_summary_values(
            job_runs(engine, job_id), run_facts(engine, job_id), kind="variant", asked=True,
            pairs=FILL_PAIRS, stop_reason=f"max pairs ({FILL_PAIRS}) reached",
            design=Design(FILL_PAIRS, FILL_PAIRS), no_agreement=None)}
            for job_id in job_ids]
        with engine.begin() as connection:
            connection.execute(update(Job).where(Job.id == bindparam("job_id")), values)
    finally:
        engine.dispose()
    return len(values)


def summarize(db_url: str, job_ids: range, chunk: int = 250) -> None:
    """Summaries of ``job_ids``, computed on every core: about 70 ms a job, most of the
    fill's time."""
    tasks = [(db_url, list(job_ids[i:i + chunk])) for i in range(0, len(job_ids), chunk)]
    with multiprocessing.get_context("spawn").Pool(os.cpu_count()) as pool:
        done = sum(pool.imap_unordered(_summarize_jobs, tasks))
    print(f"  summarized {done} jobs", flush=True)


def register_bench_worker(bench: Bench) -> None:
    # A registration row only: no worker process runs. It makes `farm submit`'s capability
    # check (a live worker of the class with the build and model file) pass, so that every
    # job is stored and posted to the gpu.bench queue.
    engine = make_engine(bench.db_url)
    try:
        registry.register(engine, "bench-registered-worker", {
            "host": "bench-host", "gpu_class": BENCH_CLASS, "devices": [], "gpus": [],
            "driver": None, "builds": {"cpu": "version: 6500 (1a2b3c4d)"},
            "models": [BENCH_MODEL_FILE], "pid": 0})
    finally:
        engine.dispose()


# --- timed commands ---------------------------------------------------------------------


def farm(bench: Bench, *args: str) -> tuple[float, str]:
    """Run ``farm ARGS`` in a fresh process; its wall-clock seconds and stdout. The clock
    stops when the process has ended and its output is read, before this script decodes
    it (50 MB of JSON: a tenth of a second that is the bench's, not the farm's)."""
    start = time.perf_counter()
    proc = subprocess.run([str(FARM), *args], env=bench.env(), capture_output=True,
                          check=False)
    elapsed = time.perf_counter() - start
    stdout, stderr = proc.stdout.decode(), proc.stderr.decode()
    if proc.returncode != 0:
        raise BenchFailure(f"farm {' '.join(args)} exited {proc.returncode}:\n"
                           f"{stdout[-2000:]}\n{stderr[-4000:]}")
    return elapsed, stdout


def queued_messages(redis_url: str, queue: str) -> int:
    client = redis.Redis.from_url(redis_url)
    try:
        return sum(int(client.llen(key)) for key in client.scan_iter(f"{queue}*")
                   if client.type(key) == b"list")
    finally:
        client.close()


def time_submit(bench: Bench) -> None:
    path = write_matrix(bench.workdir / "submit.yaml", submit_matrix())
    seconds, out = farm(bench, "submit", str(path))
    queued = queued_messages(bench.redis_url, f"gpu.{BENCH_CLASS}")
    if queued != SUBMIT_JOBS:
        raise BenchFailure(f"farm submit: {queued} messages on gpu.{BENCH_CLASS}, expected "
                           f"{SUBMIT_JOBS}; it said: {out.strip()}")
    bench.figures.append(Figure(f"submit {SUBMIT_JOBS} jobs", seconds, 5.0,
                                f"{queued} queued"))
    seconds, out = farm(bench, "submit", str(path))
    queued = queued_messages(bench.redis_url, f"gpu.{BENCH_CLASS}")
    if queued != SUBMIT_JOBS or "posted none" not in out:
        raise BenchFailure(f"resubmit: {queued} messages on gpu.{BENCH_CLASS}, expected "
                           f"{SUBMIT_JOBS} and nothing posted; it said: {out.strip()}")
    bench.figures.append(Figure(f"resubmit {SUBMIT_JOBS} waiting jobs", seconds, 5.0,
                                f"{queued} queued, none posted"))


def time_report(bench: Bench, repeat: int) -> None:
    """Each report once as the first after the fill (it works every row out and keeps it
    with its job, and keeps the report), then ``repeat`` times printing the kept report."""
    campaign = "bench-fill-05"
    for attempt in range(1 + repeat):
        seconds, out = farm(bench, "report", campaign, "--format", "json")
        rows = json.loads(out)["jobs"]
        runs = sum(int(row["runs"]) for row in rows)
        if len(rows) != JOBS_PER_CAMPAIGN or runs != JOBS_PER_CAMPAIGN * RUNS_PER_JOB:
            raise BenchFailure(f"farm report {campaign}: {len(rows)} rows, {runs} runs")
        if any(row["speedup"] is None for row in rows):
            raise BenchFailure(f"farm report {campaign}: a job without a speedup")
        bench.figures.append(Figure(_nth("report 1 campaign", attempt), seconds,
                                    None if attempt == 0 else 1.0,
                                    f"{len(rows)} jobs, {runs} runs"))
    expected = CAMPAIGNS * JOBS_PER_CAMPAIGN + SUBMIT_JOBS
    for attempt in range(1 + repeat):
        seconds, out = farm(bench, "report", "--all", "--format", "json")
        rows = json.loads(out)["jobs"]
        runs = sum(int(row["runs"]) for row in rows)
        if len(rows) != expected or runs != CAMPAIGNS * JOBS_PER_CAMPAIGN * RUNS_PER_JOB:
            raise BenchFailure(f"farm report --all: {len(rows)} rows, {runs} runs; expected "
                               f"{expected} rows")
        bench.figures.append(Figure(_nth("report --all", attempt), seconds,
                                    None if attempt == 0 else 1.0,
                                    f"{len(rows)} jobs, {runs} runs"))


def _nth(name: str, attempt: int) -> str:
    return f"{name}, keeping rows" if attempt == 0 else f"{name} #{attempt}"


def time_status(bench: Bench) -> None:
    for campaign in ("bench-fill-05", "bench-submit"):
        seconds, out = farm(bench, "status", campaign)
        if "jobs" not in out:
            raise BenchFailure(f"farm status {campaign}: {out.strip()}")
        bench.figures.append(Figure(f"status {campaign}", seconds, None,
                                    out.splitlines()[0][:60]))


def time_startup(bench: Bench) -> None:
    seconds, _ = farm(bench, "--version")
    bench.figures.append(Figure("farm --version (startup)", seconds, None))


# --- set-up, tear-down, output ----------------------------------------------------------


def print_figures(figures: list[Figure]) -> None:
    print(f"\n{'step':<30} {'seconds':>8} {'target':>8}  {'verdict':<7} detail")
    for figure in figures:
        target = "-" if figure.target is None else f"< {figure.target:g}"
        verdict = ("" if figure.target is None
                   else "PASS" if figure.seconds < figure.target else "MISS")
        print(f"{figure.name:<30} {figure.seconds:>8.2f} {target:>8}  {verdict:<7} "
              f"{figure.detail}")


def flush_redis(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    try:
        client.flushdb()
    finally:
        client.close()


def run(bench: Bench, repeat: int) -> None:
    flush_redis(bench.redis_url)
    seconds, _ = farm(bench, "db", "upgrade")
    bench.figures.append(Figure("farm db upgrade", seconds, None))
    start = time.perf_counter()
    fill(bench)
    total = CAMPAIGNS * JOBS_PER_CAMPAIGN * RUNS_PER_JOB
    bench.figures.append(Figure("fill (COPY, summaries, VACUUM)", time.perf_counter() - start,
                                None, f"{total} runs, {CAMPAIGNS * JOBS_PER_CAMPAIGN} jobs"))
    register_bench_worker(bench)
    time_startup(bench)
    time_submit(bench)
    time_report(bench, repeat)
    time_status(bench)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--pg-url", default="postgresql://postgres@127.0.0.1:5432/postgres",
                        help="admin URL; a fresh database specfarm_bench_* is made beside it")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/14",
                        help="broker URL; this Redis database is flushed at start and end")
    parser.add_argument("--keep", action="store_true", help="keep the database at the end")
    parser.add_argument("--repeat", type=int, default=1,
                        help="run each report this many times after the first (each a "
                        "cold process)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    name = f"specfarm_bench_{secrets.token_hex(4)}"
    db_url = make_url(args.pg_url).set(database=name).render_as_string(hide_password=False)
    with psycopg.connect(args.pg_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    bench = Bench(admin_url=args.pg_url, db_url=db_url, redis_url=args.redis_url,
                  workdir=Path(tempfile.mkdtemp(prefix="specfarm-bench-")))
    print(f"database {name}, redis {args.redis_url}, files in {bench.workdir}", flush=True)
    failed = False
    try:
        run(bench, args.repeat)
    except BenchFailure as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        failed = True
    finally:
        print_figures(bench.figures)
        flush_redis(bench.redis_url)
        shutil.rmtree(bench.workdir, ignore_errors=True)
        if args.keep:
            print(f"kept database: FARM_DATABASE_URL={db_url}")
        else:
            with psycopg.connect(args.pg_url, autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
