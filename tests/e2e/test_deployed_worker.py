"""A deployed worker runs a Hub-model job on a commit it builds, confined as each deployment
confines it: the systemd unit's view and compose's, read from deploy/ (not copied here).

Each view is made with bubblewrap around a real `farm worker`: the root read-only but for
the API file systems /dev and /proc (``ProtectSystem=strict``; compose's ``read_only``),
/proc/sys read-only where the unit says ``ProtectKernelTunables`` (it does not: the
sandbox could not mount its /proc), only the folders the deployment lets it
write writable (``StateDirectory``, ``CacheDirectory``, ``ReadWritePaths``; compose's
volumes), the read-only binds as read-only (the operator's models at ``/models``, the
worker config), a private ``/tmp`` (``PrivateTmp``; compose's ``tmpfs``), an unprivileged
user (uid 10001, the image's; the unit's ``User=``) with no capability (compose's
``cap_drop``; the unit grants none), the deployment's environment and command. In it the
worker downloads the model from the tests' Hub stand-in, builds the commit from a git
daemon, and runs both in its own sandbox (bubblewrap inside bubblewrap). Not reproduced:
compose's seccomp profile (deploy/worker-seccomp.json: tests/security/test_sandbox.py runs
bubblewrap under it) and Docker's AppArmor profile, which compose turns off for the
sandbox (both checked here, as the sandbox needs them).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from farm.store.models import Run
from tests.e2e import planted
from tests.e2e.test_fleet import FARM, Fleet, shared_redis_fleet, wait_for
from tests.e2e.test_source_builds import git_daemon
from tests.helpers import COPY_PROMPT
from tests.hub_standin import COMMIT, FILE, REPO, HubStandin, hub, shards, smol_gguf
from tests.integration.test_deploy import DEPLOY, ENV_EXAMPLE, SYSTEMD, compose
from workers.setup.provision import Provisioned

__all__ = ["hub", "shards", "smol_gguf"]  # the stand-in's fixtures, used by name
pytestmark = pytest.mark.server
UNIT = SYSTEMD / "specfarm-worker@.service"
VENV_FARM = "/opt/specfarm/.venv/bin/farm"


@dataclass
class View:
    """What a deployment lets its worker see: folders inside -> how, its environment and
    its command."""

    env: dict[str, str]
    command: list[str]
    writable: list[str] = field(default_factory=list)  # folders inside
    read_only: list[tuple[str, str]] = field(default_factory=list)  # (what, inside)
    tmpfs: list[str] = field(default_factory=list)
    cap_drop_all: bool = False
    kernel_tunables_read_only: bool = False


def _service_settings(path: Path) -> dict[str, list[str]]:
    """The [Service] section of a unit file, each key's values in order."""
    section, found = "", dict[str, list[str]]()
    for line in path.read_text().splitlines():
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service" and "=" in line and not line.startswith(("#", ";")):
            key, _, value = line.partition("=")
            found.setdefault(key.strip(), []).append(value.strip())
    return found


def unit_view() -> View:
    """The systemd worker unit's view of instance 0."""
    unit = _service_settings(UNIT)
    assert unit["ProtectSystem"] == ["strict"], "the view below is ProtectSystem=strict's"
    env = dict(item.split("=", 1) for line in unit.get("Environment", [])
               for item in line.split())
    env["FARM_GPU_CLASS"] = "deployed"  # from farm.env, with the URLs
    [exec_start] = unit["ExecStart"]
    command = [re.sub(r"\$\{(\w+)\}", lambda m: env[m.group(1)], word).replace("%i", "0")
               for word in exec_start.split()]
    writable = [f"/var/lib/{name}" for name in unit.get("StateDirectory", [])]
    writable += [f"/var/cache/{name}" for name in unit.get("CacheDirectory", [])]
    writable += [path for line in unit.get("ReadWritePaths", []) for path in line.split()]
    assert unit.get("ProtectHome") in (["read-only"], ["yes"], ["tmpfs"])  # / is read-only
    return View(env=env, command=command, writable=writable,
                read_only=[("models", "/models"), ("config", "/etc/specfarm/worker-0.yaml")],
                tmpfs=["/tmp", "/var/tmp"] if unit.get("PrivateTmp") == ["yes"] else [],
                # The unit's user is not root and gets no capability (no AmbientCapabilities).
                cap_drop_all="AmbientCapabilities" not in unit,
                kernel_tunables_read_only=unit.get("ProtectKernelTunables") == ["yes"])


def compose_view(tmp_path: Path) -> View:
    """compose's first GPU worker, rendered by docker-compose from env.example."""
    rendered = compose(ENV_EXAMPLE, "config")
    assert rendered.returncode == 0, rendered.stderr
    service = yaml.safe_load(rendered.stdout)["services"]["worker-gpu0"]
    # The sandbox needs namespaces and a fresh /proc, which Docker's defaults refuse.
    assert {"seccomp:./worker-seccomp.json", "apparmor=unconfined",
            "systempaths=unconfined"} <= set(service.get("security_opt", []))
    assert service.get("read_only") is True, "the view below is a read-only root's"
    writable, read_only = [], []
    for volume in service["volumes"]:
        source, inside, *mode = volume.split(":")
        if mode == ["ro"]:
            read_only.append(("config" if inside.startswith("/etc/") else "models", inside))
        else:
            assert not source.startswith("/"), f"{volume}: a bind of a host folder, writable"
            writable.append(inside)
    env = {name: str(value) for name, value in service["environment"].items()}
    return View(env=env, command=service["command"].split(), writable=writable,
                read_only=read_only, tmpfs=list(service.get("tmpfs", [])),
                cap_drop_all=service.get("cap_drop") == ["ALL"])


@dataclass
class Place:
    """Mount points made on this machine for a view (bubblewrap binds onto what exists),
    removed afterwards if they were not there."""

    made: list[Path] = field(default_factory=list)

    def need(self, inside: str, is_file: bool) -> None:
        path = Path(inside)
        missing = [p for p in (path, *path.parents) if not p.exists()]
        for item in reversed(missing):
            if item == path and is_file:
                item.touch()
            else:
                item.mkdir()
            self.made.append(item)

    def undo(self) -> None:
        for item in reversed(self.made):
            if item.is_dir():
                item.rmdir()
            else:
                item.unlink()


@pytest.fixture(scope="module")
def served_repo(provisioned: Provisioned, tmp_path_factory: pytest.TempPathFactory
                ) -> Iterator[tuple[str, str]]:
    """The provisioned llama.cpp tree as one commit, served by `git daemon`: the git URL
    and the commit."""
    bare = tmp_path_factory.mktemp("served")
    commit = planted.bare_sdist_repository(tmp_path_factory.mktemp("git"), bare)
    daemon, port = git_daemon(bare)
    yield f"git://127.0.0.1:{port}/repo.git", commit
    daemon.terminate()
    daemon.wait()


def _start_confined(fleet: Fleet, view: View, place: Place, git: str) -> tuple[Path, str]:
    """`farm worker` as the view lets it run; returns the host folder behind its downloads
    dir and the GPU class its command serves."""
    gpu_class = view.command[view.command.index("--gpu-class") + 1]
    example = yaml.safe_load((DEPLOY / "worker.example.yaml").read_text())
    config = {key: example[key] for key in ("models-dir", "downloads-dir")}
    config |= {"gpu-class": gpu_class, "sources": [git]}
    host = {"config": fleet.root / "worker.yaml", "models": fleet.root / "operator-models"}
    host["config"].write_text(yaml.safe_dump(config))
    host["models"].mkdir()
    # The worker's own user (uid 10001 in a user namespace of its own): an unprivileged
    # process, as under the unit's User= or the image's USER.
    argv = ["bwrap", "--ro-bind", "/", "/", "--dev-bind", "/dev", "/dev", "--bind", "/proc",
            "/proc", "--unshare-user", "--uid", "10001", "--gid", "10001", "--die-with-parent"]
    if view.kernel_tunables_read_only:
        argv += ["--ro-bind", "/proc/sys", "/proc/sys"]
    for inside in view.tmpfs:
        argv += ["--tmpfs", inside]
    # The farm as installed (the deployment's /opt/specfarm/.venv): this checkout's venv,
    # visible again where a private /tmp hid it (a checkout under /tmp).
    venv = Path(sys.executable).parents[1]
    argv += ["--ro-bind", str(venv), str(venv)]
    folders = {}
    for inside in view.writable:
        folders[inside] = fleet.root / "writable" / inside.strip("/").replace("/", "-")
        folders[inside].mkdir(parents=True)
        place.need(inside, is_file=False)
        argv += ["--bind", str(folders[inside]), inside]
    for what, inside in view.read_only:
        place.need(inside, is_file=what == "config")
        argv += ["--ro-bind", str(host[what]), inside]
    if view.cap_drop_all:
        argv += ["--cap-drop", "ALL"]
    assert config["models-dir"] in [inside for _, inside in view.read_only]
    # systemd gives a service the system's locale (LANG), as a shell has it here: ccache
    # hashes it, and the operator's ccache was written under it.
    locale = {name: value for name, value in os.environ.items()
              if name == "LANG" or name.startswith("LC_")}
    env = {"PATH": os.environ["PATH"], **locale, **view.env,
           "HOME": view.env["FARM_DATA_DIR"],  # the specfarm user's home in both
           # From farm.env (systemd) or .env (compose): the services, the Hub, the lease.
           **{name: fleet.env[name] for name in ("FARM_DATABASE_URL", "FARM_BROKER_URL",
                                                   "FARM_LEASE_SECONDS", "HF_ENDPOINT")},
           "FARM_VISIBILITY_TIMEOUT": "43200", "FARM_JOB_TIME_LIMIT": "3600",
           # The operator's ccache, read by the builds of jobs' commits.
           "CCACHE_DIR": os.environ["CCACHE_DIR"]}
    command = [FARM if word == VENV_FARM or word == "farm" else word for word in view.command]
    # The deployments serve GPU 0; this machine has none, and a worker refuses a GPU that
    # NVML does not see: here the same command serves its class on the CPU.
    devices = command.index("--devices")
    del command[devices:devices + 2]
    config_inside = next(inside for what, inside in view.read_only if what == "config")
    command[command.index("--config") + 1] = config_inside
    log = (fleet.root / "confined.log").open("wb")
    fleet.workers["confined"] = subprocess.Popen(
        [*argv, "--", *command], env=env, stdout=log, stderr=subprocess.STDOUT,
        start_new_session=True)
    wait_for(lambda: " live " in fleet.farm("workers").stdout, 60, "the worker to register")
    downloads = Path(config["downloads-dir"])
    [cache] = [inside for inside in view.writable if downloads.is_relative_to(inside)]
    return folders[cache] / downloads.relative_to(cache), gpu_class


@pytest.fixture
def deployed(tmp_path: Path, postgres_url: str, smollm2: Path, hub: HubStandin,
             ) -> Iterator[tuple[Fleet, Place]]:
    place = Place()
    try:
        with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
            fleet.env["HF_ENDPOINT"] = hub.url
            yield fleet, place
    finally:
        place.undo()


@pytest.mark.parametrize("deployment", ["systemd", "compose"])
def test_a_deployed_worker_downloads_a_hub_model_and_builds_a_commit_in_its_sandbox(
        deployment: str, deployed: tuple[Fleet, Place], served_repo: tuple[str, str],
        hub: HubStandin, tmp_path: Path) -> None:
    fleet, place = deployed
    git, commit = served_repo
    view = unit_view() if deployment == "systemd" else compose_view(tmp_path)
    downloads, gpu_class = _start_confined(fleet, view, place, git)
    matrix = fleet.root / "deployed.yaml"
    matrix.write_text(yaml.safe_dump({
        "campaign": f"deployed-{deployment}", "gpu-classes": [gpu_class],
        "build": {"name": "pr", "git": git, "ref": "master"},
        "models": [{"name": "smol", "hf": REPO, "file": FILE}],
        "prompts": [COPY_PROMPT], "n-predict": 16, "repetitions": 1, "pairs": 1,
        "max-pairs": 1, "flags": {"ctx-size": 1024, "threads": 1},
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}]}))
    submitted = fleet.farm("submit", str(matrix))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: all(job.state in ("done", "failed") for job in fleet.jobs()), 600,
             "the job")
    [job] = fleet.jobs()
    log = fleet.logs()
    assert job.state == "done", (job.error, log[-3000:])
    assert (downloads / "hub" / REPO.replace("/", "--") / COMMIT / FILE).is_file()
    assert not any((fleet.root / "operator-models").iterdir()), "the models dir stays as it was"
    with Session(fleet.engine) as session:
        runs = list(session.scalars(select(Run)))
    assert runs and {(run.build_commit, run.model_source, run.sandboxed) for run in runs} == {
        (commit, f"{REPO}@{COMMIT}", True)}
    assert re.search(r"ccache: [1-9]\d* hits", log), "the operator's ccache was read"
    assert hub.gets[f"{REPO}/{FILE}"] == 1
