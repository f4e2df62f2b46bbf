"""Builds on demand, for real: a git repository made from the provisioned sdist's llama.cpp
tree with a second commit that changes one server source file (a log line the server
prints at start), built by the farm's machinery and by real `farm worker` processes.

Every build here shares the node's ccache (tests/conftest.py), so only what a commit
changes compiles; the first build of a tree still links and checks every object.
"""

from __future__ import annotations

import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from farm.errors import BuildFailed
from farm.matrix.spec import BuildSource
from farm.settings import load_settings
from farm.store.db import make_engine
from farm.store.models import Job, Run
from tests.e2e.test_fleet import Fleet, shared_redis_fleet, wait_for
from tests.helpers import COPY_PROMPT, run_cli
from workers.paths import NodePaths
from workers.setup.builds import INSIDE_TREE
from workers.setup.manifests import load_manifest
from workers.setup.ondemand import make_source_build
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
FARM = str(Path(sys.executable).with_name("farm"))
SERVER_SOURCE = "tools/server/server.cpp"
LINE_A = 'SRV_INF("%s", "initializing ...\\n");'
LINE_B = 'SRV_INF("%s", "initializing (commit B) ...\\n");'


@dataclass(frozen=True)
class TwoCommits:
    """The repository and its commits: A (the sdist as is) and B (one log line changed)."""

    repo: Path
    a: str
    b: str

    @property
    def url(self) -> str:
        return f"file://{self.repo}"

    def source(self, commit: str, **extra: object) -> BuildSource:
        return BuildSource.model_validate({"git": self.url, "ref": "master",
                                           "commit": commit, **extra})


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture(scope="module")
def two_commits(provisioned: Provisioned, tmp_path_factory: pytest.TempPathFactory
                ) -> TwoCommits:
    manifest = load_manifest("cpu", NodePaths.of(load_settings()))
    assert manifest is not None
    assert manifest.tree is not None
    tree = Path(manifest.tree)
    repo = tmp_path_factory.mktemp("git") / "llama.cpp"
    shutil.copytree(tree, repo, ignore=shutil.ignore_patterns("build-specfarm-*"))
    _git(repo, "init", "-q", "-b", "master")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "A: b11434 from the sdist")
    first = _git(repo, "rev-parse", "HEAD")
    source = repo / SERVER_SOURCE
    assert source.read_text().count(LINE_A) == 1
    source.write_text(source.read_text().replace(LINE_A, LINE_B))
    _git(repo, "commit", "-qam", "B: the server says which commit it is")
    return TwoCommits(repo, first, _git(repo, "rev-parse", "HEAD"))


@pytest.fixture(scope="module")
def node_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A cache dir the tests of this module share (their builds), apart from the node's."""
    return tmp_path_factory.mktemp("cache")


def _start_line(server: Path) -> str:
    """The line the server logs as it starts (it then fails on the missing model)."""
    result = subprocess.run([str(server), "-m", "/nonexistent.gguf", "--port", "0",
                             "--threads", "1"],
                            capture_output=True, text=True, timeout=60, check=False)
    return next(line for line in (result.stdout + result.stderr).splitlines()
                if "initializing" in line)


def _ccache_counts(said: str) -> dict[str, int]:
    """The hits and misses a build said it had of the node's ccache (its last such line)."""
    found = re.findall(r"\[build\] ccache: (\d+) hits?, (\d+) miss", said)
    assert found, said[-2000:]
    return {"hits": int(found[-1][0]), "misses": int(found[-1][1])}


def test_two_commits_built_in_one_tree_each_binary_runs_its_own_code(
        two_commits: TwoCommits, node_paths: NodePaths, node_cache: Path,
        capfd: pytest.CaptureFixture[str]) -> None:
    paths = replace(node_paths, cache_dir=node_cache)
    started = time.monotonic()
    a = make_source_build(two_commits.source(two_commits.a), paths, [], None).manifest
    a_seconds, first = time.monotonic() - started, _ccache_counts(capfd.readouterr().err)
    started = time.monotonic()
    b = make_source_build(two_commits.source(two_commits.b), paths, [], None).manifest
    b_seconds, second = time.monotonic() - started, _ccache_counts(capfd.readouterr().err)
    # One tree, a fresh build folder per commit (a job's commit reads nothing another
    # commit's build wrote), removed once its binaries are copied out.
    assert a.tree is not None and a.tree == b.tree and a.configure[4] != b.configure[4]
    # The sandbox shows every build its tree at one path (the same unity sources, so the
    # same ccache entries, for every commit).
    assert a.configure[2] == b.configure[2] == str(INSIDE_TREE)
    folders = [Path(a.tree) / Path(manifest.configure[4]).name for manifest in (a, b)]
    assert not any(folder.exists() for folder in folders), folders
    assert "initializing ..." in _start_line(Path(a.server))
    assert "initializing (commit B) ..." in _start_line(Path(b.server))
    for manifest in (a, b):
        dynamic = subprocess.run(["readelf", "-d", manifest.server], capture_output=True,
                                 text=True, check=True).stdout
        assert not re.search(r"lib(llama|ggml|mtmd)", dynamic), dynamic
        assert "RUNPATH" not in dynamic and "RPATH" not in dynamic
    # A's binary does not depend on its tree: with the tree moved away it still runs A's code.
    tree = Path(a.tree)
    tree.rename(tree.with_name("moved"))
    assert "initializing ..." in _start_line(Path(a.server))
    tree.with_name("moved").rename(tree)
    # B changed one translation unit (server.cpp): in its fresh folder every other object
    # the operator's builds compiled (about 190) comes from the node's ccache, which a job's
    # build reads and never writes, so what A compiled anew (what carries the commit id:
    # build-info.cpp, llama.cpp) B compiles again, and server.cpp. libllama's unity sources
    # name their files by absolute path: they hit only because every build sees its tree at
    # one path (a tree at its own path missed all ten of them, and the build took 3x longer).
    assert first["misses"] <= 4, first
    assert 1 <= second["misses"] <= first["misses"] + 1 and second["hits"] >= 150, \
        (first, second)
    # A commit that does not compile fails with the compiler's own words.
    _git(two_commits.repo, "checkout", "-q", "-b", "broken")
    broken = two_commits.repo / SERVER_SOURCE
    broken.write_text(broken.read_text().replace(LINE_B, "this is not C++;"))
    _git(two_commits.repo, "commit", "-qam", "C: does not compile")
    commit = _git(two_commits.repo, "rev-parse", "HEAD")
    _git(two_commits.repo, "checkout", "-q", "master")
    with pytest.raises(BuildFailed) as caught:
        make_source_build(two_commits.source(commit), paths, [], None)
    assert "the build failed (exit" in str(caught.value)
    assert "server.cpp" in str(caught.value) and "error:" in str(caught.value)
    print(f"\nbuild of A {a_seconds:.0f} s (ccache {first}), "
          f"of B in the same tree {b_seconds:.0f} s (ccache {second})")


def test_farm_run_builds_the_commit_its_matrix_names(
        two_commits: TwoCommits, node_cache: Path, smollm2: Path, tmp_path: Path) -> None:
    matrix = tmp_path / "matrix.yaml"
    matrix.write_text(yaml.safe_dump({
        # A commit id as the ref, from the URL the first test built it from: made once.
        "campaign": "commit-a", "build": {"name": "a", "git": two_commits.url,
                                          "ref": two_commits.a},
        "models": [{"name": "smollm2", "path": str(smollm2)}], "prompts": [COPY_PROMPT],
        "n-predict": 16, "repetitions": 1, "pairs": 1, "max-pairs": 1,
        "flags": {"ctx-size": 1024, "threads": 1},
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]}))
    result = run_cli("run", str(matrix), env={"FARM_CACHE_DIR": str(node_cache)})
    assert result.exit_code == 0, result.output
    engine = make_engine(load_settings().database_url)
    with Session(engine) as session:
        runs = list(session.scalars(select(Run)))
    engine.dispose()
    assert runs and {run.build_commit for run in runs} == {two_commits.a}
    assert all("initializing ..." in Path(run.server_log or "").read_text() for run in runs)


def git_daemon(root: Path, port: int = 0) -> tuple[subprocess.Popen[bytes], int]:
    """``git daemon`` on 127.0.0.1 serving the bare repositories in ``root`` (repo.git), on
    ``port`` (a free one when 0)."""
    if not port:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
    daemon = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--listen=127.0.0.1",
         f"--port={port}", f"--base-path={root}", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(lambda: subprocess.run(["git", "ls-remote", f"git://127.0.0.1:{port}/repo.git"],
                                    capture_output=True, check=False).returncode == 0,
             30, "git daemon")
    return daemon, port


@dataclass
class Box:
    """One machine's workers: they share its cache dir (its builds, its build lock)."""

    fleet: Fleet
    cache: Path

    def start(self, name: str, sources: list[str]) -> None:
        config = self.fleet.root / f"{name}.yaml"
        config.write_text(yaml.safe_dump({"name": name, "gpu-class": "box",
                                          "models-dir": str(self.fleet.models),
                                          "sources": sources}))
        log = (self.fleet.root / f"{name}.log").open("wb")
        self.fleet.workers[name] = subprocess.Popen(
            [FARM, "worker", "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
            env={**self.fleet.env, "FARM_CACHE_DIR": str(self.cache)}, start_new_session=True)
        running = sum(process.poll() is None for process in self.fleet.workers.values())
        wait_for(lambda: self.fleet.farm("workers").stdout.count(" live ") >= running,
                 60, f"worker {name} to register")

    def matrix(self, campaign: str, git: str) -> Path:
        path = self.fleet.root / f"{campaign}.yaml"
        path.write_text(yaml.safe_dump({
            "campaign": campaign, "gpu-classes": ["box"],
            "build": {"name": "pr", "git": git, "ref": "master"},
            "models": [{"name": "smollm2", "file": "smollm2.gguf"}],
            "prompts": [COPY_PROMPT], "n-predict": 16, "repetitions": 1,
            "pairs": 1, "max-pairs": 1, "flags": {"ctx-size": 1024, "threads": 1},
            "variants": [{"name": t, "flags": {"spec-type": t}}
                         for t in ("ngram-simple", "ngram-mod")]}))
        return path


@pytest.fixture
def box(tmp_path: Path, postgres_url: str, smollm2: Path) -> Iterator[Box]:
    with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
        yield Box(fleet, tmp_path / "box-cache")


def _log_times(log: str, pattern: str) -> list[str]:
    return [line[:23] + " " + line.split("]", 1)[-1].strip()[:120]
            for line in log.splitlines() if re.search(pattern, line)]


def test_two_workers_on_one_box_build_once_and_both_run_that_commit(
        box: Box, two_commits: TwoCommits) -> None:
    box.start("alpha", [two_commits.url])
    box.start("beta", [two_commits.url + "/"])  # the same source, spelled otherwise
    submitted = box.fleet.farm("submit", str(box.matrix("ondemand", two_commits.url)))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: all(job.state in ("done", "failed") for job in box.fleet.jobs()), 600,
             "both jobs")
    jobs = box.fleet.jobs()
    assert [job.state for job in jobs] == ["done", "done"], [job.error for job in jobs]
    assert {job.lease_owner for job in jobs} == {"alpha", "beta"}
    assert all(job.spec["baseline"]["build"]["source"]["commit"] == two_commits.b
               for job in jobs)
    assert all(job.build_seconds and job.build_seconds > 1 for job in jobs)  # one waited
    made = sorted((box.cache / "builds").glob("src-*/build.json"))
    assert len(made) == 1
    logs = box.fleet.logs()
    assert logs.count("[build] $ cmake --build") == 1, "one build for two workers"
    with Session(box.fleet.engine) as session:
        runs = list(session.scalars(select(Run)))
        commits = {run.build_commit for run in runs}
        assert commits == {two_commits.b}
        assert all("initializing (commit B)" in Path(run.server_log or "").read_text()
                   for run in runs)
    print("\ntimeline:\n" + "\n".join(_log_times(
        logs, r"Task .* received|\[build\] \$ (git clone|cmake -S)|builds made in|"
              r"succeeded in")))


def test_a_worker_not_allowed_the_source_hands_the_job_to_one_that_is(
        box: Box, two_commits: TwoCommits, node_cache: Path) -> None:
    box.cache = node_cache  # where the first test built B: this one is about trust
    box.start("allowed", [two_commits.url])
    box.start("refuses", ["https://github.com/ggml-org/llama.cpp"])
    assert box.fleet.farm("submit", str(box.matrix("trust", two_commits.url))).returncode == 0
    wait_for(lambda: all(job.state in ("done", "failed") for job in box.fleet.jobs()), 600,
             "both jobs")
    jobs = box.fleet.jobs()
    assert [(job.state, job.lease_owner) for job in jobs] == [("done", "allowed")] * 2
    refused = [job.refusals for job in jobs if job.refusals]
    assert refused, "the refusing worker took one of the two jobs first"
    assert refused[0] == {"refuses": (
        f"source {two_commits.url} is not allowed on this node (it builds only from: "
        "https://github.com/ggml-org/llama.cpp); building code is running it: add it to "
        "`sources:` in the worker config if you trust whoever may submit it")}


def test_a_job_every_live_worker_refused_fails_with_their_reasons(
        box: Box, two_commits: TwoCommits, tmp_path: Path) -> None:
    served = tmp_path / "served"
    served.mkdir()
    _git(served.parent, "clone", "-q", "--bare", str(two_commits.repo), str(served / "repo.git"))
    daemon, port = git_daemon(served)
    url = f"git://127.0.0.1:{port}/repo.git"
    try:
        box.start("one", [url])
        box.start("two", [url])
        matrix = box.matrix("refused", url)
        # Both allow it, and the ref resolves at submit; then the repository is gone for
        # good (a source that only does not answer is an outage: tests/fault/test_outages.py).
        submitted = box.fleet.farm("submit", str(matrix))
        assert submitted.returncode == 0, submitted.stderr
        shutil.rmtree(served / "repo.git")
        wait_for(lambda: all(job.state == "failed" for job in box.fleet.jobs()), 300,
                 "both jobs to fail")
    finally:
        daemon.terminate()
        daemon.wait()
    for job in box.fleet.jobs():
        assert (job.failure_class, job.deferrals) == ("build_unavailable", 0)
        assert set(job.refusals) == {"one", "two"}
        error = job.error or ""
        assert error.startswith("every live worker of class box refused it: one: ")
        assert f"{url}: cannot fetch: " in error and "not exported" in error
    time.sleep(3)
    assert not any("[build] $ cmake" in line for line in box.fleet.logs().splitlines())
    with Session(box.fleet.engine) as session:
        assert all(job.state == "failed" for job in session.scalars(select(Job)))
