"""Workers as Slurm array tasks, for real: a single-node Slurm (tests/slurm.py) runs
deploy/slurm/specfarm-worker.sbatch as written, on real PostgreSQL and Redis, with `farm
worker` on the null engine (tests/bench/null_worker.py: a job sleeps and writes one run
per arm; claims, leases, hand-backs, heartbeats and the allocation's watch are the farm's
own). Each test prints its timeline as measured (docs/deployment.md, "On Slurm")."""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from sqlalchemy import Engine, select, update
from sqlalchemy.orm import Session

from farm.store import registry
from farm.store.models import Campaign, Job, Worker
from tests.e2e.test_fleet import Fleet, shared_redis_fleet, wait_for
from tests.slurm import LocalSlurm, local_slurm
from workers.fleet.allocation import GRACE
from workers.setup.provision import Provisioned

# Not alone: the workers sleep rather than measure, and nothing here is held to a time
# but the stated grace and idle windows, far above what two tests side by side stretch.
pytestmark = pytest.mark.server
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "deploy" / "slurm" / "specfarm-worker.sbatch"
CLASS = "slurm-cpu"
IDLE = 5  # --exit-when-idle of the tasks, seconds


@pytest.fixture(scope="module")
def slurm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSlurm]:
    with local_slurm(tmp_path_factory.mktemp("slurm")) as cluster:
        yield cluster


@dataclass
class SlurmFleet:
    """A fleet whose workers are Slurm jobs of the deploy script."""

    fleet: Fleet
    slurm: LocalSlurm
    env: dict[str, str]

    def sbatch(self, *options: str) -> str:
        """Submit the deploy script (its options overridden by ``options``): the job id."""
        return self.slurm.run("sbatch", "--parsable", *self.placement(), *options,
                              str(SCRIPT), CLASS, env=self.env).strip()

    def placement(self) -> list[str]:
        root = self.fleet.root
        return [f"--chdir={root}", f"--output={root}/slurm-%A_%a.log", "--cpus-per-task=1"]

    def submit(self, campaign: str) -> None:
        done = self.fleet.farm("submit", str(self.fleet.matrix(campaign, [CLASS], variants=3)))
        assert done.returncode == 0, done.stderr

    def workers(self) -> dict[str, Worker]:
        with Session(self.fleet.engine) as session:
            return {row.name: row for row in session.scalars(select(Worker))}

    def jobs(self, campaign: str) -> list[Job]:
        with Session(self.fleet.engine) as session:
            return list(session.scalars(select(Job).join(Campaign)
                                        .where(Campaign.name == campaign).order_by(Job.id)))

    def gone(self, job: str) -> bool:
        return not any(task == job or task.startswith(f"{job}_") for task in self.slurm.jobs())

    def logs(self) -> str:
        return "".join(path.read_text() for path in sorted(self.fleet.root.glob("slurm-*.log")))


@pytest.fixture
def slurm_fleet(tmp_path: Path, postgres_url: str, smollm2: Path, provisioned: Provisioned,
                slurm: LocalSlurm) -> Iterator[SlurmFleet]:
    with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
        config = tmp_path / "worker.yaml"
        config.write_text(yaml.safe_dump({"models-dir": str(fleet.models),
                                          "builds": {"cpu": str(provisioned.server)}}))
        # The null engine's `farm`: the deploy script runs it as SPECFARM_FARM.
        null_farm = tmp_path / "farm-null"
        null_farm.write_text(f"#!/bin/sh\nPYTHONPATH={ROOT} exec {sys.executable} -m "
                             "tests.bench.null_worker \"$@\"\n")
        null_farm.chmod(0o755)
        (tmp_path / "null").mkdir()
        env = {**fleet.env, **slurm.env, "SPECFARM_FARM": str(null_farm),
               "SPECFARM_WORKER_CONFIG": str(config), "SPECFARM_EXIT_WHEN_IDLE": str(IDLE),
               "NULL_WORKER_LOG": str(tmp_path / "null"), "NULL_BLOCK_SECONDS": "2"}
        fleet.env = env
        yield SlurmFleet(fleet, slurm, env)


def _seed_live_worker(engine: Engine, name: str) -> None:
    """The class's last worker, live as `farm submit` needs one (a worker of the class
    that ran before: its row as its registration wrote it)."""
    registry.register(engine, name, {
        "host": socket.gethostname(), "builds": {"cpu": "seed"}, "models": ["smollm2.gguf"],
        "sources": [], "gpu_class": CLASS, "devices": [], "gpus": [], "driver": None,
        "pid": os.getpid()})


def _since(start: datetime, moment: datetime | None) -> str:
    return "-" if moment is None else f"{(moment - start).total_seconds():5.1f} s"


def test_a_short_deadline_claims_nothing_and_launch_sizes_an_array_that_drains_and_exits(
        slurm_fleet: SlurmFleet) -> None:
    sf, engine = slurm_fleet, slurm_fleet.fleet.engine
    _seed_live_worker(engine, "seed")
    # What the jobs' estimate reads: the same measurements took 10 minutes before.
    sf.submit("earlier")
    with Session(engine) as session, session.begin():
        finished = datetime.now(UTC)
        session.execute(update(Job).where(Job.id.in_([job.id for job in sf.jobs("earlier")]))
                        .values(state="done", started_at=finished - timedelta(seconds=600),
                                finished_at=finished, attempt=1))
    sf.submit("drain")
    registry.mark_stopped(engine, "seed")  # gone: from here on, only Slurm's workers

    # A worker whose allocation ends in 3 minutes: 600 s of estimate cannot fit.
    began = datetime.now(UTC)
    short = sf.sbatch("--time=3")
    wait_for(lambda: sf.gone(short), 60, "the short task to exit")
    exited = sf.workers()[f"{CLASS}@slurm-{short}-0"].stopped_at
    assert [(job.state, job.attempt) for job in sf.jobs("drain")] == [("queued", 0)] * 3
    assert "not claimed: its estimate (600 s) ends after this worker's deadline" in sf.logs()
    assert "exiting: the next job cannot finish before the deadline" in sf.logs()

    launched_at = datetime.now(UTC)
    launched = sf.fleet.farm("slurm", "launch", CLASS, "--cap", "2", "--script", str(SCRIPT),
                             "--", "--time=30", *sf.placement())
    assert launched.returncode == 0, launched.stderr
    array = launched.stdout.split("array job ")[1].split()[0]
    assert launched.stdout == (f"class {CLASS}: 3 pending jobs; submitted array job {array} "
                               "with 2 tasks (cap 2)\n")
    wait_for(lambda: all(job.state == "done" for job in sf.jobs("drain")), 90, "3 jobs done")
    drained = max(job.finished_at for job in sf.jobs("drain") if job.finished_at)
    wait_for(lambda: sf.gone(array), 30 + IDLE, "both tasks to exit when idle")

    jobs, workers = sf.jobs("drain"), sf.workers()
    tasks = [f"{CLASS}@slurm-{array}-{task}" for task in (0, 1)]
    assert all(job.attempt == 1 and job.lease_owner in tasks for job in jobs)
    assert all(workers[task].stopped_at for task in tasks)
    runs = [key for key in sf.fleet.run_keys() if key[0] in {job.id for job in jobs}]
    assert len(runs) == 3 * 2 and len({key[:5] for key in runs}) == len(runs)
    assert sf.logs().count(f"no pending job of class {CLASS} (--exit-when-idle)") == 2
    again = sf.fleet.farm("slurm", "launch", CLASS, "--script", str(SCRIPT))
    assert again.stdout == f"class {CLASS}: 0 pending jobs; nothing submitted\n"

    starts = sorted(job.started_at for job in jobs if job.started_at)
    print(f"\ndeadline: task started {_since(began, began)}, exited without a claim "
          f"{_since(began, exited)}\ndrain: launch +0.0 s, first claim "
          f"{_since(launched_at, starts[0])}, last job done {_since(launched_at, drained)}, "
          "tasks exited " + ", ".join(_since(launched_at, workers[task].stopped_at)
                                      for task in tasks)
          + f" (idle window {IDLE} s); jobs per task "
          + str({task[-1]: sum(job.lease_owner == task for job in jobs) for task in tasks}))


def test_a_task_preempted_mid_job_hands_it_back_and_the_other_task_runs_it_once(
        slurm_fleet: SlurmFleet) -> None:
    sf = slurm_fleet
    sf.env["NULL_BLOCK_SECONDS"] = "6"  # long enough to be stopped mid-job
    sf.env["SPECFARM_EXIT_WHEN_IDLE"] = "15"  # longer than a submit takes after registering
    began = datetime.now(UTC)
    array = sf.sbatch("--array=0-1", "--time=10")
    tasks = [f"{CLASS}@slurm-{array}-{task}" for task in (0, 1)]
    wait_for(lambda: set(tasks) <= set(sf.workers()), 60, "both tasks' workers to register")
    registered = max(sf.workers()[task].started_at for task in tasks)
    sf.submit("preempt")
    wait_for(lambda: {job.lease_owner for job in sf.jobs("preempt")
                      if job.state == "running"} == set(tasks), 30, "a job on each task")
    [victim] = [job.id for job in sf.jobs("preempt") if job.lease_owner == tasks[0]]

    termed = datetime.now(UTC)
    sf.slurm.run("scancel", "--batch", "--signal=TERM", f"{array}_0")
    wait_for(lambda: sf.gone(f"{array}_0"), GRACE, f"task 0 to exit within {GRACE} s")
    sf.slurm.run("scancel", f"{array}_0")  # its grace over: killed, were it still there
    exited = sf.workers()[tasks[0]].stopped_at
    wait_for(lambda: all(job.state == "done" for job in sf.jobs("preempt")), 60, "jobs done")
    wait_for(lambda: sf.gone(array), 30 + 15, "task 1 to exit when idle")

    jobs = {job.id: job for job in sf.jobs("preempt")}
    assert (jobs[victim].attempt, jobs[victim].lease_owner) == (1, tasks[1])
    assert all(job.attempt == 1 for job in jobs.values())
    assert "handed back (worker stopping)" in sf.logs()
    runs = [key for key in sf.fleet.run_keys() if key[0] in jobs]
    # One run per arm and job, none twice: the stopped attempt wrote none.
    assert len(runs) == 3 * 2 and len({key[:5] for key in runs}) == len(runs)
    print(f"\npreemption: tasks registered {_since(began, registered)}; TERM at +0.0 s, "
          f"task 0 exited {_since(termed, exited)}, its job claimed again "
          f"{_since(termed, jobs[victim].started_at)} and done "
          f"{_since(termed, jobs[victim].finished_at)} by task 1, which exited when idle "
          f"{_since(termed, sf.workers()[tasks[1]].stopped_at)} (idle window 15 s)")
