"""Builds a matrix names by source: the ref resolved once to a commit, keys, the configure
line a worker runs (CUDA from NVML's compute capability), and which sources a node allows.

Real git repositories in the test's directory (a file path and a file:// URL); nothing is
compiled here (tests/e2e/test_source_builds.py builds llama.cpp)."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from celery.exceptions import SoftTimeLimitExceeded

from farm.errors import BuildFailed, BuildUnavailable, ConfigError
from farm.matrix.load import load_matrix
from farm.matrix.sources import resolve_commit
from farm.matrix.spec import BuildSource
from tests.e2e.test_fleet import wait_for
from tests.e2e.test_source_builds import git_daemon
from tests.helpers import run_cli
from tests.unit.test_telemetry import MIB, Device, FakeClock, FakeNvml
from workers.fleet.task import clock_stopped, job_clock
from workers.job.admission import check_allowed
from workers.job.runtime.sandbox import Sandbox
from workers.job.telemetry import gpus_for_devices
from workers.paths import NodePaths
from workers.setup.builds import BuildRequest, configure_argv, resolve_source
from workers.setup.ondemand import building, measuring, source_request
from workers.setup.steps import TAIL_LINES, compile_step


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t",
                           *args], check=True, capture_output=True, text=True).stdout.strip()


def _commit(repo: Path, text: str) -> str:
    (repo / "server.cpp").write_text(text)
    _git(repo, "add", "server.cpp")
    _git(repo, "commit", "-qm", text)
    return _git(repo, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "llama.cpp"
    path.mkdir()
    _git(path, "init", "-q", "-b", "master")
    _commit(path, "A")
    return path


def _matrix(directory: Path, build: object) -> Path:
    path = directory / "matrix.yaml"
    path.write_text(yaml.safe_dump({
        "campaign": "c", "build": build, "models": [{"name": "m"}], "prompts": ["hi"],
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]}))
    return path


def test_a_moving_ref_is_stored_as_its_commit_and_enters_the_job_key_not_the_comparable(
        repo: Path, tmp_path: Path) -> None:
    first = _git(repo, "rev-parse", "HEAD")
    path = _matrix(tmp_path, {"name": "pr", "git": f"file://{repo}", "ref": "master"})
    before = load_matrix(path)[1][0]
    second = _commit(repo, "B")
    after = load_matrix(path)[1][0]
    assert before.build.source is not None and after.build.source is not None
    assert (before.build.source.commit, after.build.source.commit) == (first, second)
    assert before.job_key != after.job_key
    assert before.comparable_key == after.comparable_key
    # A local repository (relative to the matrix) names the same commit; a named build keeps
    # the key it always had.
    local = load_matrix(_matrix(tmp_path, {"name": "pr", "git": "llama.cpp",
                                           "ref": second[:10]}))[1][0]
    assert local.build.source is not None and local.build.source.commit == second
    named = load_matrix(_matrix(tmp_path, "cpu"))[1][0]
    assert named.build.key_part == "cpu" and named.build.source is None


@pytest.mark.parametrize(("build", "message"), [
    ({"name": "pr", "git": "URL", "ref": "nope"},
     "build.ref: {url} has no ref 'nope'; give a branch, a tag, pull/N/head"),
    ({"name": "pr", "git": "URL", "ref": "-uhelp"}, "build.ref: String should match pattern"),
    ({"name": "pr", "git": "URL", "ref": "master..HEAD"}, "build.ref: 'master..HEAD' is a range"),
    ({"name": "pr", "git": "URL", "ref": "master", "cmake": ["-DBUILD_SHARED_LIBS=ON"]},
     "build.cmake[0]: cmake option '-DBUILD_SHARED_LIBS=ON': the farm builds llama.cpp "
     "statically"),
    ({"name": "pr", "git": "URL", "ref": "master", "cmake": ["--trace"]},
     "build.cmake[0]: cmake option '--trace': give -DNAME=VALUE"),
    ({"name": "pr", "git": "URL"}, "`git` and `ref` go together"),
    ({"name": "pr", "git": "URL", "ref": "master", "cuda-arch": "86"},
     "`cuda-arch` applies to `backend: cuda` only"),
    ({"name": "pr", "path": "/bin/x", "git": "URL", "ref": "master"}, "not both"),
    ({"name": "pr", "git": "file:///nowhere/llama.cpp", "ref": "master"},
     "build.git: cannot read file:///nowhere/llama.cpp"),
])
def test_a_bad_source_build_is_one_message_naming_the_file_and_key(
        repo: Path, tmp_path: Path, build: dict[str, object], message: str) -> None:
    url = f"file://{repo}"
    entry = {key: (url if value == "URL" else value) for key, value in build.items()}
    path = _matrix(tmp_path, entry)
    with pytest.raises(ConfigError) as caught:
        load_matrix(path)
    assert f"{path}: " in str(caught.value)
    assert message.format(url=url) in str(caught.value)


def test_dry_run_shows_the_commit_the_ref_names(repo: Path, tmp_path: Path) -> None:
    commit = _git(repo, "rev-parse", "HEAD")
    path = _matrix(tmp_path, {"name": "pr", "git": f"file://{repo}", "ref": "master",
                              "cmake": ["-DGGML_AVX2=OFF"]})
    result = run_cli("run", "--dry-run", str(path), width=400)
    assert result.exit_code == 0, result.output
    assert (f"build    pr: file://{repo} master = commit {commit}, cpu -DGGML_AVX2=OFF (made "
            "when the job runs)") in result.output


def _cuda(arch: str | None = None) -> BuildSource:
    return BuildSource(git="https://github.com/ggml-org/llama.cpp", ref="master",
                       commit="a" * 40, backend="cuda", cuda_arch=arch)


def test_a_cuda_build_compiles_for_the_gpus_nvml_reports_unless_the_matrix_says() -> None:
    nvml = FakeNvml(FakeClock(), [Device("GPU-a", "NVIDIA GeForce RTX 3090", 24 * 1024 * MIB,
                                         capability=(8, 6)),
                                  Device("GPU-b", "NVIDIA L4", 23034 * MIB, capability=(8, 9))])
    gpus = gpus_for_devices([0, 1], nvml)
    request = source_request(_cuda(), gpus)
    argv = configure_argv(request, Path("/src"), Path("/src/build"))
    assert "-DGGML_CUDA=ON" in argv and "-DBUILD_SHARED_LIBS=OFF" in argv
    assert "-DCMAKE_CUDA_ARCHITECTURES=86;89" in argv
    assert request.name.endswith("-sm86-89") and request.ref == "a" * 40
    pinned = configure_argv(source_request(_cuda("90"), gpus), Path("/src"), Path("/b"))
    assert "-DCMAKE_CUDA_ARCHITECTURES=90" in pinned
    blind = gpus_for_devices([0], FakeNvml(FakeClock(), [Device("GPU-c", "old", MIB,
                                                                capability=None)]))
    with pytest.raises(BuildUnavailable, match="set `cuda-arch`"):
        source_request(_cuda(), blind)


def test_a_node_builds_only_the_sources_its_operator_allows(tmp_path: Path) -> None:
    source = _cuda()
    check_allowed(source, ["https://github.com/ggml-org/llama.cpp.git/"])
    check_allowed(source, None)  # farm run: the user's own matrix
    with pytest.raises(BuildUnavailable) as caught:
        check_allowed(source, [str(tmp_path / "mirror.git")])
    assert (f"source https://github.com/ggml-org/llama.cpp is not allowed on this node (it "
            f"builds only from: {tmp_path / 'mirror.git'})") in str(caught.value)


def test_a_source_fetched_through_git_daemon_is_checked_out_at_the_stored_commit(
        repo: Path, tmp_path: Path, node_paths: NodePaths) -> None:
    first = _git(repo, "rev-parse", "HEAD")
    second = _commit(repo, "B")
    served = tmp_path / "served"
    served.mkdir()
    _git(tmp_path, "clone", "-q", "--bare", str(repo), str(served / "repo.git"))
    daemon, port = git_daemon(served)
    url = f"git://127.0.0.1:{port}/repo.git"
    try:
        assert resolve_commit(url, "master", "m.yaml: build") == second
        paths = replace(node_paths, cache_dir=tmp_path / "cache")
        tree = resolve_source(BuildRequest(name="x", source=url, ref=first), paths)
        assert (tree.commit, (tree.path / "server.cpp").read_text()) == (first, "A")
        # A git killed mid-fetch leaves its lock: the next fetch (under the node's build
        # lock, so no git of this node runs there) removes it.
        clone = next((paths.cache_dir / "git").iterdir())
        (clone / ".git" / "index.lock").write_text("")
        again = resolve_source(BuildRequest(name="x", source=url, ref=second), paths)
        assert again.path == tree.path and (again.path / "server.cpp").read_text() == "B"
        assert not (clone / ".git" / "index.lock").exists()
        # A pinned commit the source lacks (a mirror behind): may pass. No repository:
        # will not.
        with pytest.raises(BuildUnavailable, match=f"commit {'c' * 40} is not there") as lag:
            resolve_source(BuildRequest(name="x", source=url, ref="c" * 40), paths)
        assert lag.value.transient
        gone = f"git://127.0.0.1:{port}/nope.git"
        with pytest.raises(BuildUnavailable, match=f"{gone}: cannot fetch: .*not exported") \
                as refused:
            resolve_source(BuildRequest(name="x", source=gone, ref=first), paths)
        assert not refused.value.transient
    finally:
        daemon.terminate()
        daemon.wait()
    # The source does not answer: may pass.
    with pytest.raises(BuildUnavailable, match=f"{url}: cannot fetch: .*refused") as down:
        resolve_source(BuildRequest(name="x", source=url, ref=second), paths)
    assert down.value.transient
    assert "give the local clone instead (`farm build NAME --source" in str(down.value)
    assert "local clone" not in str(refused.value)  # a source that is gone: no such advice


def _hold(paths: NodePaths, kind: str, seconds: float, log: Path) -> None:
    """``kind``: a job's source build (build), another build (replace: `farm build`,
    pruning) or a measurement."""
    with (building(paths, for_job=kind == "build") if kind in ("build", "replace")
          else measuring(paths)):
        with log.open("a") as out:
            out.write(f"{kind} {time.monotonic():.3f}\n")
        time.sleep(seconds)
        with log.open("a") as out:
            out.write(f"{kind}-end {time.monotonic():.3f}\n")


def test_a_build_waits_for_measurements_and_goes_before_new_ones(
        tmp_path: Path, node_paths: NodePaths) -> None:
    paths = replace(node_paths, cache_dir=tmp_path / "cache")
    log = tmp_path / "order"
    context = multiprocessing.get_context("fork")
    first = context.Process(target=_hold, args=(paths, "measure", 1.5, log))
    first.start()
    wait_for(lambda: log.exists(), 30, "the first measurement")
    builder = context.Process(target=_hold, args=(paths, "build", 1.0, log))
    builder.start()
    time.sleep(0.5)  # the build is waiting now
    late = context.Process(target=_hold, args=(paths, "measure", 0.1, log))
    late.start()
    for process in (first, builder, late):
        process.join(30)
    order = [line.split()[0] for line in log.read_text().splitlines()]
    assert order == ["measure", "measure-end", "build", "build-end", "measure", "measure-end"]


def _measure_blocks(paths: NodePaths, blocks: int, seconds: float, log: Path) -> None:
    with measuring(paths) as let_builds_go:
        for block in range(blocks):
            waited = let_builds_go()
            with log.open("a") as out:
                out.write(f"block{block} {waited:.2f}\n")
            time.sleep(seconds)
    with log.open("a") as out:
        out.write("measure-end 0\n")


def _one_after_another(paths: NodePaths, log: Path, blocks: tuple[int, float],
                       *builds: tuple[str, float]) -> None:
    """A measurement of ``blocks`` (how many, seconds each), then once its first block has
    begun the ``builds`` (kind, seconds), 0.3 s apart, each in its own process."""
    context = multiprocessing.get_context("fork")
    processes = [context.Process(target=_measure_blocks, args=(paths, *blocks, log))]
    processes[0].start()
    wait_for(lambda: log.exists(), 30, "the first block")
    for kind, seconds in builds:
        processes.append(context.Process(target=_hold, args=(paths, kind, seconds, log)))
        processes[-1].start()
        time.sleep(0.3)
    for process in processes:
        process.join(60)
        assert process.exitcode == 0


def test_a_build_waits_for_the_block_a_measurement_is_in_not_its_whole_job(
        tmp_path: Path, node_paths: NodePaths) -> None:
    """Between blocks a measurement lets a waiting build go first, then goes on: the build
    waits about one block (not the job's hours), and the measurement waits while it
    builds, never beside it."""
    log = tmp_path / "order"
    _one_after_another(replace(node_paths, cache_dir=tmp_path / "cache"), log, (10, 0.4),
                       ("build", 1.0))
    order = [line.split() for line in log.read_text().splitlines()]
    names = [name for name, _ in order]
    start, end = names.index("build"), names.index("build-end")
    assert end == start + 1  # no block beside the build
    assert start < 4 < len(names) - 1, names  # it went first, within a block or two
    waited = [float(value) for name, value in order if name.startswith("block")]
    assert [index for index, value in enumerate(waited) if value > 0] == [start], order
    assert waited[start] >= 0.9  # the block after the build waited for it
    assert names[-1] == "measure-end" and len(waited) == 10


def test_a_build_that_may_replace_what_a_job_measures_waits_for_the_whole_job(
        tmp_path: Path, node_paths: NodePaths) -> None:
    """`farm build` (which may replace the build a job measures) or pruning waits for the
    whole measurement, never between its blocks; a job's build that arrives behind it
    waits for it in turn, and nothing deadlocks."""
    log = tmp_path / "order"
    _one_after_another(replace(node_paths, cache_dir=tmp_path / "cache"), log, (6, 0.3),
                       ("replace", 0.5), ("build", 0.5))
    order = [line.split() for line in log.read_text().splitlines()]
    assert [name for name, _ in order] == [f"block{block}" for block in range(6)] + [
        "measure-end", "replace", "replace-end", "build", "build-end"]
    assert all(float(value) == 0 for name, value in order if name.startswith("block"))


def test_a_failed_compile_step_keeps_its_last_lines_and_a_full_disk_or_a_kill_is_the_nodes(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    noisy = "for i in range(100): print(f'line {i}')\nprint('x.cpp:1:2: error: boom')\nexit(2)"
    log = tmp_path / "build.log"
    with pytest.raises(BuildFailed) as caught:
        compile_step([sys.executable, "-c", noisy], {}, "the build", log,
                     sandbox=Sandbox("off"))
    lines = str(caught.value).splitlines()
    assert lines[0] == f"the build failed (exit 2); its last lines (all in {log}):"
    assert lines[1:] == [f"line {i}" for i in range(100 - TAIL_LINES + 1, 100)] + [
        "x.cpp:1:2: error: boom"]
    # Every line in the log, none on the terminal but the command.
    assert log.read_text().startswith("$ ") and log.read_text().endswith("\n".join(
        [f"line {i}" for i in range(100)] + ["x.cpp:1:2: error: boom"]) + "\n")
    assert "line 5" not in capsys.readouterr().err
    full = "print('ld: final link failed: No space left on device'); exit(1)"
    with pytest.raises(BuildUnavailable, match="no space left on device"):
        compile_step([sys.executable, "-c", full], {}, "the build", log, sandbox=Sandbox("off"))
    # Killed (the OOM killer's SIGKILL; a compiler driver's "Killed signal terminated
    # program cc1plus" under make): this node's failure, handed back, not the code's.
    killed = "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"
    with pytest.raises(BuildUnavailable, match=r"the build was killed \(exit -9: out of "
                                               "memory on this node"):
        compile_step([sys.executable, "-c", killed], {}, "the build", log,
                     sandbox=Sandbox("off"))
    oom = "print('c++: fatal error: Killed signal terminated program cc1plus'); exit(2)"
    with pytest.raises(BuildUnavailable, match=r"killed \(exit 2"):
        compile_step([sys.executable, "-c", oom], {}, "the build", log, sandbox=Sandbox("off"))


def test_a_build_step_cut_off_by_a_time_limit_is_killed_not_waited_for(tmp_path: Path) -> None:
    """A time limit (the job's, Celery's) or the worker's shutdown raised while a step runs:
    its process group is killed at once, not left running with no reader or bound while
    the worker waits for it."""
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)", str(tmp_path)]
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded), job_clock(1):
        compile_step(sleeper, {}, "the build", tmp_path / "build.log", sandbox=Sandbox("off"))
    assert time.monotonic() - started < 10
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, check=False)
    assert left.stdout == b""


def test_the_jobs_time_limit_starts_when_its_builds_are_made() -> None:
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded), job_clock(1):
        time.sleep(5)
    # a loaded box wakes late; an unarmed clock would sleep the whole 5 s
    assert 0.9 < time.monotonic() - started < 4
    with job_clock(1):
        pass
    time.sleep(1.2)  # disarmed on the way out


def test_the_jobs_clock_stops_while_it_lets_a_build_go_first() -> None:
    started = time.monotonic()
    with pytest.raises(SoftTimeLimitExceeded), job_clock(1):
        time.sleep(0.5)
        with clock_stopped():  # waiting for another job's build
            time.sleep(1.5)
        time.sleep(5)
    # 0.5 s, then 1.5 s stopped, then 0.5 s; a clock that did not stop would fire at 1 s,
    # one that did not start again never (7 s): the bounds leave a loaded box its late wake-ups
    assert 2.4 < time.monotonic() - started < 6
    with clock_stopped():  # no clock running: nothing to stop or start
        time.sleep(0.1)
