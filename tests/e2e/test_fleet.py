"""The fleet for real: Redis, PostgreSQL, `farm worker` processes, `farm submit`, Flower."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis
import yaml
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from farm.store.db import make_engine
from farm.store.models import Job, Run
from tests.helpers import COPY_PROMPT, REDIS_URL, private_redis_url
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
FARM = str(Path(sys.executable).with_name("farm"))


@dataclass
class Fleet:
    """One test's services and worker processes; everything is torn down after the test."""

    env: dict[str, str]
    root: Path
    models: Path
    engine: Engine
    workers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def farm(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([FARM, *args], capture_output=True, text=True, env=self.env,
                              timeout=300, check=False)

    def start_worker(self, name: str, gpu_class: str, server: Path) -> None:
        config = self.root / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"name": name, "gpu-class": gpu_class,
                                          "models-dir": str(self.models),
                                          "builds": {"cpu": str(server)}}))
        log = (self.root / f"{name}.log").open("wb")
        self.workers[name] = subprocess.Popen(
            [FARM, "worker", "--config", str(config)], env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True)
        running = sum(process.poll() is None for process in self.workers.values())
        wait_for(lambda: self.farm("workers").stdout.count(" live ") >= running,
                 60, f"worker {name} to register")

    def matrix(self, campaign: str, classes: list[str], variants: int = 1,
               repetitions: int = 1) -> Path:
        path = self.root / f"{campaign}.yaml"
        spec_types = ["ngram-simple", "ngram-mod", "ngram-map-k"][:variants]
        path.write_text(yaml.safe_dump({
            "campaign": campaign, "gpu-classes": classes,
            "models": [{"name": "smollm2", "file": "smollm2.gguf"}],
            "prompts": [COPY_PROMPT], "n-predict": 24, "repetitions": repetitions,
            "pairs": 1, "max-pairs": 1,
            "flags": {"ctx-size": 1024, "threads": 1},
            "variants": [{"name": t, "flags": {"spec-type": t}} for t in spec_types]}))
        return path

    def kill_worker(self, name: str) -> None:
        """kill -9 of the worker's whole process group, as when its host is lost."""
        os.killpg(self.workers[name].pid, signal.SIGKILL)
        self.workers[name].wait()

    def stop_workers(self) -> None:
        for process in self.workers.values():
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()

    def logs(self) -> str:
        return "".join(path.read_text() for path in sorted(self.root.glob("*.log")))

    def jobs(self) -> list[Job]:
        with Session(self.engine) as session:
            return list(session.scalars(select(Job).order_by(Job.id)))

    def run_keys(self) -> list[tuple[Any, ...]]:
        with Session(self.engine) as session:
            return list(session.execute(select(Run.job_id, Run.arm, Run.block, Run.prompt_id,
                                               Run.repetition, Run.attempt, Run.worker_name)))


def wait_for(condition: Callable[[], bool], seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out after {seconds:.0f} s waiting for {what}")


@contextmanager
def open_fleet(root: Path, smollm2: Path, database_url: str, broker_url: str,
               **settings: str) -> Iterator[Fleet]:
    """A migrated database, a models dir with SmolLM2, the FARM_* environment (lease 15 s
    unless ``settings`` say otherwise); every worker stopped on the way out."""
    models = root / "models"
    models.mkdir()
    (models / "smollm2.gguf").hardlink_to(smollm2)
    env = {**os.environ, "FARM_DATABASE_URL": database_url, "FARM_BROKER_URL": broker_url,
           "FARM_DATA_DIR": str(root / "data"), "FARM_LEASE_SECONDS": "15", **settings}
    fleet = Fleet(env=env, root=root, models=models, engine=make_engine(database_url))
    assert fleet.farm("db", "upgrade").returncode == 0
    try:
        yield fleet
    finally:
        fleet.stop_workers()
        fleet.engine.dispose()


@contextmanager
def shared_redis_fleet(root: Path, smollm2: Path, database_url: str) -> Iterator[Fleet]:
    """``open_fleet`` on a database of its own and a scratch database of the shared Redis,
    emptied before and after."""
    broker = private_redis_url()
    redis.Redis.from_url(broker).flushdb()
    try:
        with open_fleet(root, smollm2, database_url, broker) as fleet:
            yield fleet
    finally:
        redis.Redis.from_url(broker).flushdb()


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, smollm2: Path) -> Iterator[Fleet]:
    with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
        yield fleet


def test_campaign_split_across_gpu_classes_runs_every_job_once(
        fleet: Fleet, provisioned: Provisioned) -> None:
    fleet.start_worker("alpha", "class-a", provisioned.server)
    fleet.start_worker("beta", "class-b", provisioned.server)
    matrix = fleet.matrix("split", ["class-a", "class-b"], variants=2)
    submitted = fleet.farm("submit", str(matrix))
    assert submitted.returncode == 0, submitted.stderr
    assert "posted 2 to gpu.class-a, 2 to gpu.class-b" in submitted.stdout
    wait_for(lambda: all(job.state == "done" for job in fleet.jobs()), 240, "4 jobs done")

    jobs = fleet.jobs()
    assert {(job.gpu_class, job.lease_owner) for job in jobs} == {
        ("class-a", "alpha"), ("class-b", "beta")}
    assert all(job.attempt == 1 for job in jobs)
    keys = fleet.run_keys()
    assert len(keys) == 4 * 2 and len({key[:5] for key in keys}) == len(keys)
    status = fleet.farm("status", "split")
    assert "4 done" in status.stdout
    report = fleet.farm("report", "split", "--group-by", "gpu_class")
    assert "class-a" in report.stdout and "class-b" in report.stdout

    again = fleet.farm("submit", str(matrix))
    assert again.returncode == 0
    assert "posted none; not posted: 4 done" in again.stdout


def test_submit_reports_jobs_no_live_worker_can_run(fleet: Fleet,
                                                   provisioned: Provisioned) -> None:
    fleet.start_worker("alpha", "class-a", provisioned.server)
    result = fleet.farm("submit", str(fleet.matrix("orphans", ["class-a", "nobody"])))
    assert result.returncode == 1
    assert "no live worker of GPU class 'nobody'" in result.stderr
    assert [job.gpu_class for job in fleet.jobs()] == ["class-a"]


def servers_of(models: Path) -> set[int]:
    pids = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if str(models).encode() in (entry / "cmdline").read_bytes():
                    pids.add(int(entry.name))
            except OSError:
                continue
    return pids


def test_job_of_a_killed_worker_moves_to_another_worker_and_runs_once(
        fleet: Fleet, provisioned: Provisioned) -> None:
    fleet.start_worker("first", "shared", provisioned.server)
    matrix = fleet.matrix("killed", ["shared"], repetitions=6)
    assert fleet.farm("submit", str(matrix)).returncode == 0
    wait_for(lambda: len(fleet.run_keys()) >= 2, 120, "the first runs")
    fleet.start_worker("second", "shared", provisioned.server)
    servers = servers_of(fleet.models)
    assert servers, "the job's llama-server should be running"

    killed_at = time.monotonic()
    fleet.kill_worker("first")
    wait_for(lambda: not (servers & servers_of(fleet.models)), 10,
             "the killed worker's llama-server to die with it")
    wait_for(lambda: fleet.jobs()[0].state == "done", 15 + 60, "the job done elsewhere")
    assert time.monotonic() - killed_at < 15 + 60

    [job] = fleet.jobs()
    assert (job.attempt, job.lease_owner) == (2, "second")
    keys = fleet.run_keys()
    assert len(keys) == 2 * 6 and len({key[:5] for key in keys}) == 12
    assert {key[6] for key in keys if key[5] == 2} == {"second"}


def test_flower_lists_workers_and_named_tasks_with_auth(
        fleet: Fleet, provisioned: Provisioned) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**fleet.env, "FARM_FLOWER_AUTH": "admin:s3cret"}
    flower = subprocess.Popen([FARM, "flower", "--port", str(port)], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: _answers(base), 60, "Flower to answer")
        assert httpx.get(f"{base}/api/workers").status_code == 401
        fleet.start_worker("alpha", "class-a", provisioned.server)
        assert fleet.farm("submit", str(fleet.matrix("flowers", ["class-a"]))).returncode == 0
        auth = ("admin", "s3cret")
        wait_for(lambda: any("alpha" in name for name in httpx.get(
            f"{base}/api/workers?refresh=1", auth=auth, timeout=30).json()),
            60, "the worker in Flower")
        wait_for(lambda: _task_args(base, auth) != [], 60, "the task in Flower")
        assert _task_args(base, auth) == ["flowers smollm2 ngram-simple [class-a]"]
    finally:
        os.killpg(flower.pid, signal.SIGTERM)
        flower.wait(30)


def _answers(base: str) -> bool:
    try:
        httpx.get(base, timeout=2)
    except httpx.TransportError:
        return False
    return True


def _task_args(base: str, auth: tuple[str, str]) -> list[str]:
    tasks = httpx.get(f"{base}/api/tasks", auth=auth, timeout=10).json()
    return [task["args"] for task in tasks.values() if task["name"] == "farm.execute_job"]


def test_cancel_stops_a_running_job_and_its_server(fleet: Fleet,
                                                  provisioned: Provisioned) -> None:
    fleet.start_worker("alpha", "class-a", provisioned.server)
    assert fleet.farm("submit", str(fleet.matrix("stopme", ["class-a"],
                                                 repetitions=20))).returncode == 0
    wait_for(lambda: len(fleet.run_keys()) >= 1, 120, "the first run")
    result = fleet.farm("cancel", "stopme")
    assert result.returncode == 0 and "1 job cancelled" in result.stdout
    wait_for(lambda: not servers_of(fleet.models), 30, "the cancelled job's server to stop")
    stored = len(fleet.run_keys())
    assert stored < 2 * 20 and fleet.jobs()[0].state == "cancelled"
    time.sleep(6)  # longer than a lease renewal: nothing more is written
    assert len(fleet.run_keys()) == stored
    assert "No result backend" not in fleet.logs()


def test_a_duplicate_delivery_of_a_finished_job_runs_nothing(
        fleet: Fleet, provisioned: Provisioned) -> None:
    from farm.fleet.app import make_app, queue_name
    from farm.fleet.reconcile import send
    from farm.settings import load_settings
    from farm.store.outbox import Message

    fleet.start_worker("alpha", "class-a", provisioned.server)
    assert fleet.farm("submit", str(fleet.matrix("twice", ["class-a"]))).returncode == 0
    wait_for(lambda: fleet.jobs()[0].state == "done", 120, "the job done")
    runs = fleet.run_keys()
    job = fleet.jobs()[0]
    app = make_app(load_settings(broker_url=fleet.env["FARM_BROKER_URL"]))
    send(app, [Message(job.id, f"job-{job.id}-9", queue_name(job.gpu_class), "duplicate")])
    log = fleet.root / "alpha.log"
    wait_for(lambda: "not claimable" in log.read_text(), 30, "the duplicate to be refused")
    assert fleet.run_keys() == runs and fleet.jobs()[0].attempt == 1


def test_worker_and_submit_refuse_an_unmigrated_database(
        tmp_path: Path, postgres_url: str, provisioned: Provisioned) -> None:
    env = {**os.environ, "FARM_DATABASE_URL": postgres_url,
           "FARM_BROKER_URL": f"{REDIS_URL}/15", "FARM_DATA_DIR": str(tmp_path)}
    worker = subprocess.run([FARM, "worker", "--gpu-class", "x"], env=env, capture_output=True,
                            text=True, timeout=60, check=False)
    assert worker.returncode == 1 and "run `farm db upgrade`" in worker.stderr
    assert "Traceback" not in worker.stderr


def test_unreachable_services_give_one_message_and_exit_1(tmp_path: Path,
                                                         postgres_url: str) -> None:
    matrix = tmp_path / "m.yaml"
    matrix.write_text(yaml.safe_dump({
        "campaign": "c", "models": [{"name": "m"}], "prompts": ["hi"],
        "variants": [{"name": "v", "flags": {"spec-type": "ngram-simple"}}]}))
    base = {**os.environ, "FARM_DATA_DIR": str(tmp_path)}
    cases = [({"FARM_DATABASE_URL": "postgresql://postgres@127.0.0.1:1/x",
               "FARM_BROKER_URL": f"{REDIS_URL}/15"}, "cannot connect to the database"),
             ({"FARM_DATABASE_URL": postgres_url, "FARM_BROKER_URL": "redis://127.0.0.1:1/0"},
              "cannot reach the broker")]
    subprocess.run([FARM, "db", "upgrade"], env={**base, "FARM_DATABASE_URL": postgres_url},
                   check=True, capture_output=True)
    for env, message in cases:
        result = subprocess.run([FARM, "submit", str(matrix)], env={**base, **env},
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 1 and message in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    engine = make_engine(postgres_url)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0  # nothing half-stored
    engine.dispose()


# A race on the fleet: `farm submit` of a matrix with `tune:` posts its round to a real
# worker of the matrix's GPU class, waits for it in the store while this process decides the
# race and prints the answer; the same command answers again from the store, posting
# nothing. Two n-gram settings, a budget of one round: the mechanics, not which setting
# wins (tests/unit/test_race.py).
def test_a_tune_matrix_submitted_is_raced_on_the_fleet_and_answers_again_from_the_store(
        fleet: Fleet, provisioned: Provisioned) -> None:
    matrix = fleet.root / "raced.yaml"
    matrix.write_text(yaml.safe_dump({
        "campaign": "raced", "gpu-classes": ["class-a"],
        "models": [{"name": "smollm2", "file": "smollm2.gguf"}],
        "prompts": [COPY_PROMPT], "n-predict": 16, "repetitions": 1,
        "flags": {"ctx-size": 1024, "threads": 1},
        "tune": {"space": {"spec-type": ["ngram-simple", "ngram-mod"]},
                 "budget-pairs": 8}}))
    dry = fleet.farm("submit", "--dry-run", str(matrix))
    assert dry.returncode == 0, dry.stderr
    assert "raced: 2 candidates" in dry.stdout and not fleet.jobs()

    fleet.start_worker("alpha", "class-a", provisioned.server)
    raced = fleet.farm("submit", str(matrix))
    assert raced.returncode == 0, raced.stderr
    assert "raced-r1: on the workers of class class-a (2 jobs;" in raced.stderr
    best = next(line for line in raced.stdout.splitlines() if line.startswith("best: "))
    assert best.split(":")[1].strip() in ("spec-type=ngram-simple", "spec-type=ngram-mod")
    assert "campaigns: raced-r1" in raced.stdout and "8 pairs" in raced.stdout
    jobs = fleet.jobs()
    assert [(job.state, job.lease_owner, job.attempt) for job in jobs] == [
        ("done", "alpha", 1)] * 2
    runs = len(fleet.run_keys())
    assert runs == 2 * 4 * 2  # two candidates, four pairs of two blocks, one run a block

    again = fleet.farm("submit", str(matrix))
    assert again.returncode == 0, again.stderr
    assert again.stdout == raced.stdout and "round 1" not in again.stderr
    assert len(fleet.jobs()) == 2 and len(fleet.run_keys()) == runs

