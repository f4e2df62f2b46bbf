"""A pull request's code, for real: a planted commit of the provisioned llama.cpp tree whose
top CMakeLists.txt (at configure time) and whose `llama-server` (first thing in its main,
so the `--version`/`--help` probes run it too) each try to

- read the canaries: a file in the worker's config dir (the test's fake
  `$HOME/.config/specfarm/canary`, beside the worker's config), a file in its data dir
  (FARM_DATA_DIR) and two variables of its environment (FARM_CANARY_SECRET and
  FARM_DATABASE_URL);
- reach a TCP listener this module runs on 127.0.0.1 and send what it read (the CMake
  code by bash's /dev/tcp and by `file(DOWNLOAD)`, the server by socket/connect);
- write a file outside its build dir: a folder of the test's, the fake `$HOME`, the
  operator's ccache and the top of the node's cache dir.

It is built and run by `farm run` and by a real `farm worker` (Celery, Redis, PostgreSQL)
with the sandbox on: the benchmark works, every run says it was sandboxed, the listener
sees no connection, no file appears, and the build log and every server log carry the
planted code's own line (it ran) saying it read nothing. With the sandbox off
(`FARM_SANDBOX=off`) the same commit reaches the canary files and the listener and writes
its files, so these tests can fail. (The worker's variables reach neither way: builds and
servers get a minimal environment whether sandboxed or not.)

Every server start of it also forks a daemon that sleeps: none outlives its sandbox. And a
job can make the same commit hostile to the worker itself (tests/security/hostile_plant.py):
its server, by the model alias the job gives it, reports its decode 1.6x faster than it
ran (the job's speedup is the client's clock's, flagged), answers `/metrics` with a
position of a billion or streams past its n-predict (the job fails with the bound's
reason), or swaps its socket for a link to a UNIX listener of the test's (never reached);
its build, by an engine option, prints one endless line, hides sparse files over the
folder's bound under a mode-000 folder, or leaves `ccache.stats` a FIFO or a link to
/dev/zero (the job fails with the reason, in seconds). `farm run`'s peak RSS is read
while it meets them.

Each test builds the commit in a cache dir of its own (so its configure runs the planted
CMake code); the node's ccache serves what the provisioned build compiled, so only the
configure, the commit's own translation units and the links cost time. The hostile
server's jobs reuse the sandboxed `farm run`'s build; a hostile build's configure makes
three tiny targets instead of the tree's.
"""

from __future__ import annotations

import os
import secrets
import statistics
import subprocess
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Row

from tests.e2e import planted
from tests.e2e.test_fleet import Fleet, shared_redis_fleet, wait_for
from tests.helpers import COPY_PROMPT
from tests.security import hostile_plant
from tests.security.hostile_plant import BUILD_MODES, LIE_FACTOR, POSITION
from tests.security.hostile_world import (
    FARM,
    FarmRun,
    Listener,
    World,
    farm_run,
    jobs_of,
    kill_daemons,
    runs_of,
    serve,
)
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
# A cache dir per test: each configures the commit (the hostile server's jobs use "on"'s).
CACHES = ("off", "on", "worker", "builds")


@pytest.fixture(scope="module")
def world(provisioned: Provisioned, tmp_path_factory: pytest.TempPathFactory
          ) -> Iterator[World]:
    root = tmp_path_factory.mktemp("hostile")
    home, data, plant = root / "home", root / "data", root / "plant"
    config = home / ".config" / "specfarm"
    caches = {name: root / f"cache-{name}" for name in CACHES}
    for folder in (config, data, plant, *caches.values()):
        folder.mkdir(parents=True)
    tokens = {name: f"CANARY-{name}-{secrets.token_hex(8)}" for name in ("config", "data", "env")}
    (config / "canary").write_text(tokens["config"] + "\n")
    (data / "canary").write_text(tokens["data"] + "\n")
    listener, unix = Listener(), Listener()
    repo = root / "llama.cpp"
    planted.sdist_repository(repo, "A: b11434 from the sdist")
    world = World(root, home, data, plant, Path(os.environ["CCACHE_DIR"]), caches, tokens,
                  listener, unix, repo, "")
    servers = [serve(listener), serve(unix, world.unix_path)]
    # Outside the build dir: a folder of the test's, the worker's home, the operator's
    # ccache, and the top of each test's cache dir (where the node's builds live).
    hostile_plant.plant_hostile(repo, [config / "canary", data / "canary"], world.targets,
                                listener.port, world.unix_path)
    commit = planted.commit(repo, "B: a pull request that goes for the worker's secrets")
    try:
        yield replace(world, commit=commit)
    finally:
        kill_daemons()
        world.reset()
        for server in servers:
            server.shutdown()
            server.server_close()


def _matrix(path: Path, campaign: str, build: dict[str, Any], model: dict[str, str],
            **extra: object) -> Path:
    """SmolLM2, baseline against ngram-simple, one prompt, one pair: the benchmark works."""
    path.write_text(yaml.safe_dump({
        "campaign": campaign, "build": build, "models": [model], "prompts": [COPY_PROMPT],
        "n-predict": 16, "repetitions": 1, "pairs": 1, "max-pairs": 1,
        "flags": {"ctx-size": 256, "threads": 1},
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}], **extra}))
    return path


def _farm_run(world: World, tmp_path: Path, smollm2: Path, cache: str,
              **env: str) -> tuple[list[Row[Any]], FarmRun]:
    """`farm run` (``farm_run``) of the benign matrix on the hostile commit, built in cache
    dir ``cache``; the campaign's runs and how the run went."""
    campaign = f"hostile-{cache}"
    matrix = _matrix(tmp_path / "matrix.yaml", campaign,
                     {"name": "pr", "git": world.url, "ref": world.commit},
                     {"name": "smollm2", "path": str(smollm2)})
    ran = farm_run(world, matrix, cache, **env)
    assert ran.result.returncode == 0, ran.result.stdout[-3000:] + ran.result.stderr[-5000:]
    return runs_of(world.database, campaign), ran


def _assert_benchmarked(runs: list[Row[Any]], commit: str, *, sandboxed: bool) -> None:
    """Both arms measured on the commit, each run recording the sandbox."""
    assert sorted(run.arm for run in runs) == ["baseline", "variant"], runs
    assert {run.build_commit for run in runs} == {commit}
    assert all(run.generated_tokens > 0 and run.decode_tok_s > 0 for run in runs)
    assert {run.sandboxed for run in runs} == {sandboxed}


def _assert_held(world: World, runs: list[Row[Any]], cache: str) -> str:
    """The commit's code ran (its CMake code in this cache dir's build, its line in every
    server's log) and got nothing: no connection, no planted file, no canary in what it
    kept. What it says it got, for the report."""
    received = world.listener.take()
    assert received == [], f"the listener got {len(received)} connections: {received!r}"
    assert not world.planted(), world.planted()
    # This test's configure ran the CMake code (its build log says what it got).
    [cmake] = [line for log in world.caches[cache].rglob("build-specfarm-*.log")
               for line in log.read_text().splitlines() if "hostile-cmake:" in line]
    # (What it "wrote" inside may have landed on the sandbox's own /tmp: what counts is
    # that nothing appeared outside.)
    assert "read 0 canary bytes, 0 secret variables, wrote" in cmake, cmake
    assert "listener: bash 0 " not in cmake and " curl 0," not in cmake, cmake
    lines = [cmake.split("hostile-cmake:", 1)[1].strip()]
    for run in runs:
        server_log = Path(run.server_log).read_text()
        [line] = [line for line in server_log.splitlines() if "hostile-server:" in line]
        assert "read 0 canary bytes, 0 secret variables, wrote" in line, line
        lines.append(line.split("hostile-server:", 1)[1].strip())
    for log in [*world.caches[cache].rglob("build-specfarm-*.log"),
                *(Path(run.server_log) for run in runs)]:
        text = log.read_text()
        assert not any(token in text for token in world.tokens.values()), log
    return "; ".join(dict.fromkeys(lines))


def test_sandbox_off_the_planted_commit_reaches_every_canary(
        world: World, tmp_path: Path, smollm2: Path) -> None:
    """The control: without the sandbox the commit's CMake code and its server reach the
    listener with the canaries and write their files (the sandboxed tests can fail)."""
    world.reset()
    runs, ran = _farm_run(world, tmp_path, smollm2, "off", FARM_SANDBOX="off")
    _assert_benchmarked(runs, world.commit, sandboxed=False)
    received = [data.decode(errors="replace") for data in world.listener.take()]
    by_origin = {origin: [text for text in received if origin in text]
                 for origin in ("from=cmake", "cmake-download", "from=server")}
    assert all(by_origin.values()), received
    # Their files are what both reach; the worker's variables neither may (the farm hands
    # builds and servers a minimal environment, sandbox or not): said, not required.
    for text in by_origin["from=cmake"] + by_origin["from=server"]:
        assert world.tokens["config"] in text and world.tokens["data"] in text, text
    variables = [name for name, value in (("FARM_CANARY_SECRET", world.tokens["env"]),
                                          ("FARM_DATABASE_URL", world.database))
                 if any(value in text for text in received)]
    names = {(path.parent, path.name) for path in world.planted()}
    assert names == {(folder, f"planted-by-{who}") for folder in world.targets
                     for who in ("cmake", "server")}, names
    for run in runs:
        assert "listener: sent" in Path(run.server_log).read_text()
    [cmake] = [line for log in world.caches["off"].rglob("build-specfarm-*.log")
               for line in log.read_text().splitlines() if "hostile-cmake:" in line]
    assert "listener: bash 0 curl 0," in cmake, cmake
    # Each server's daemon outlived it (its own session: the farm's kill of the server's
    # process group misses it); the sandbox's PID namespace is what ends them.
    left = kill_daemons()
    assert left, "no daemon of the servers' outlived them without the sandbox"
    print(f"\nsandbox off: farm run {ran.seconds:.0f} s; the listener got {len(received)} "
          f"connections ({', '.join(f'{k}: {len(v)}' for k, v in by_origin.items())}), "
          f"{len(names)} files planted; variables that reached it: {variables or 'none'}; "
          f"{len(left)} daemons left running (killed)")
    world.reset()


def test_farm_run_sandboxed_the_commit_benchmarks_and_reaches_nothing(
        world: World, tmp_path: Path, smollm2: Path) -> None:
    world.reset()
    runs, ran = _farm_run(world, tmp_path, smollm2, "on")
    _assert_benchmarked(runs, world.commit, sandboxed=True)
    got = _assert_held(world, runs, "on")
    assert kill_daemons() == [], "a server's daemon outlived its sandbox"
    print(f"\nsandbox on: farm run {ran.seconds:.0f} s (peak RSS {ran.peak_mib:.0f} MiB); "
          f"the commit got: {got}; no daemon left")


# The hostile server's jobs: each variant runs ngram-simple under the alias that sets its
# server's mode (hostile_plant.MODES); the baseline is the commit's server, unchanged.
SERVER_JOBS = {"lie": "hostile-lie", "socket": "hostile-socket", "metrics": "hostile-metrics",
               "stream": "hostile-stream"}


def test_a_hostile_server_is_refused_or_outvoted_and_leaves_nothing_behind(
        world: World, tmp_path: Path, smollm2: Path) -> None:
    """On the sandboxed run's build: a server reporting its drafting 1.6x faster than it ran
    is flagged and its job's speedup is the client's clock's; a socket swapped for a link
    mid-job is never followed (the job runs on, the link's listener hears nothing); a
    billion-position `/metrics` and a stream past its n-predict fail their jobs with the
    bound's reason; no daemon is left; `farm run`'s memory stays flat."""
    world.reset()
    variants = [{"name": name, "flags": {"spec-type": "ngram-simple", "alias": alias}}
                for name, alias in SERVER_JOBS.items()]
    matrix = _matrix(tmp_path / "server.yaml", "hostile-server",
                     {"name": "pr", "git": world.url, "ref": world.commit},
                     {"name": "smollm2", "path": str(smollm2)}, variants=variants,
                     repetitions=4, **{"n-predict": 32})
    ran = farm_run(world, matrix, "on")
    assert ran.result.returncode == 1, ran.result.stdout[-3000:] + ran.result.stderr[-3000:]
    jobs = jobs_of(world.database, "hostile-server")
    assert {name: job.state for name, job in jobs.items()} == {
        "lie": "done", "socket": "done", "metrics": "failed", "stream": "failed"}, jobs
    assert f"draft position {POSITION}" in jobs["metrics"].error, jobs["metrics"].error
    assert "streamed over" in jobs["stream"].error, jobs["stream"].error
    assert {jobs[name].failure_class for name in ("metrics", "stream")} == {"request_failed"}
    # The swap happened (its line in the variant's log) and was never followed.
    assert world.unix.take() == []
    logs = [Path(run.server_log).read_text() for run in runs_of(world.database, "hostile-server")
            if run.arm == "variant"]
    assert any("hostile-socket: swapped for a link (rename 0, symlink 0)" in log
               for log in logs), "the socket was not swapped"
    told, witnessed = _lie(world.database, jobs["lie"].summary)
    assert kill_daemons() == [], "a server's daemon outlived its sandbox"
    assert ran.peak_mib < 1024, ran.peak_mib
    print(f"\nhostile server: farm run {ran.seconds:.0f} s, peak RSS {ran.peak_mib:.0f} MiB; "
          f"the lie's speedup {told:.2f}x by the server's timings, {witnessed:.2f}x reported "
          f"(the client's clock, flagged); metrics: {jobs['metrics'].error!r}; "
          f"stream: {jobs['stream'].error!r}")


def _lie(database_url: str, summary: dict[str, Any]) -> tuple[float, float]:
    """The lying job's speedup by its server's timings (the arms' median decode tok/s as
    the runs recorded them) and as it reports it: the client's clock's, 1.6x apart, the
    disagreement flagged."""
    runs = [run for run in runs_of(database_url, "hostile-server")
            if run.variant_name == "lie"]
    assert summary["speed_clock"] == "client" and summary["clock_flag"] is True, summary
    assert abs(summary["clock_disagreement"] / LIE_FACTOR - 1) < 0.05, summary
    assert abs(summary["clock_ratio_baseline"] - 1) < 0.05, summary
    medians = {arm: statistics.median(run.decode_tok_s for run in runs if run.arm == arm)
               for arm in ("baseline", "variant")}
    told = medians["variant"] / medians["baseline"]
    assert abs(told / summary["speedup"] / LIE_FACTOR - 1) < 0.1, (told, summary["speedup"])
    return told, float(summary["speedup"])


# What each hostile build's job fails with (hostile_plant.BUILD_MODES).
BUILD_ERRORS = {"endless line": "was stopped: it printed over 64 MiB",
                "mode-000 folder of sparse files": "its build folder holds over 32 GiB",
                "ccache.stats a FIFO": "is a FIFO, not a regular file",
                "ccache.stats a link to /dev/zero": "is a symbolic link"}


@pytest.mark.parametrize("mode", list(BUILD_MODES))
def test_a_hostile_build_fails_its_job_with_the_reason_in_seconds(
        world: World, tmp_path: Path, smollm2: Path, mode: str) -> None:
    """The commit's configure, chosen by an engine option, prints one endless line, hides
    sparse files over the build folder's bound under a mode-000 folder, or leaves
    `ccache.stats` a FIFO or a link to /dev/zero: the job fails with that reason within a
    minute, `farm run`'s memory flat."""
    campaign = f"hostile-build-{BUILD_MODES[mode]}"
    matrix = _matrix(tmp_path / "build.yaml", campaign,
                     {"name": f"pr-{BUILD_MODES[mode]}", "git": world.url, "ref": world.commit,
                      "cmake": [f"-DGGML_SCHED_MAX_COPIES={BUILD_MODES[mode]}"]},
                     {"name": "smollm2", "path": str(smollm2)})
    ran = farm_run(world, matrix, "builds")
    output = ran.result.stdout + ran.result.stderr
    assert ran.result.returncode != 0, output[-3000:]
    assert BUILD_ERRORS[mode] in output, output[-3000:]
    assert ran.seconds < 120 and ran.peak_mib < 1024, (ran.seconds, ran.peak_mib)
    line = next(line for line in output.splitlines() if BUILD_ERRORS[mode] in line)
    print(f"\n{mode}: farm run {ran.seconds:.0f} s, peak RSS {ran.peak_mib:.0f} MiB: {line}")


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, smollm2: Path) -> Iterator[Fleet]:
    with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
        yield fleet


def test_a_worker_builds_and_runs_the_commit_sandboxed_and_it_reaches_nothing(
        world: World, fleet: Fleet) -> None:
    """A real `farm worker` (its config beside the canary in its config dir, its data dir
    holding the other, the database URL and the secret in its environment) that allows
    the source builds the commit and runs the job; the sandbox is its default."""
    world.reset()
    config = world.config / "worker.yaml"
    config.write_text(yaml.safe_dump({"name": "hostile", "gpu-class": "hostile",
                                      "models-dir": str(fleet.models),
                                      "sources": [world.url]}))
    log = (fleet.root / "hostile.log").open("wb")
    fleet.workers["hostile"] = subprocess.Popen(
        [FARM, "worker", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
        env={**fleet.env, "HOME": str(world.home), "FARM_DATA_DIR": str(world.data),
             "FARM_CANARY_SECRET": world.tokens["env"],
             "FARM_CACHE_DIR": str(world.caches["worker"])}, start_new_session=True)
    wait_for(lambda: " live " in fleet.farm("workers").stdout, 120, "the worker to register")
    matrix = _matrix(fleet.root / "hostile.yaml", "hostile-worker",
                     {"name": "pr", "git": world.url, "ref": "master"},
                     {"name": "smollm2", "file": "smollm2.gguf"}, **{"gpu-classes": ["hostile"]})
    started = time.monotonic()
    submitted = fleet.farm("submit", str(matrix))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: all(job.state in ("done", "failed") for job in fleet.jobs()), 600,
             "the job")
    seconds = time.monotonic() - started
    [job] = fleet.jobs()
    assert job.state == "done", (job.error, fleet.logs()[-5000:])
    runs = runs_of(fleet.env["FARM_DATABASE_URL"], "hostile-worker")
    _assert_benchmarked(runs, world.commit, sandboxed=True)
    assert {run.worker_name for run in runs} == {"hostile"}
    got = _assert_held(world, runs, "worker")
    assert kill_daemons() == [], "a server's daemon outlived its sandbox"
    print(f"\nworker, sandbox on: job {seconds:.0f} s after submit; the commit got: {got}; "
          "no daemon left")
