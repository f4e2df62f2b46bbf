"""Hub models for real: `farm run` and two `farm worker` processes on one box download a
model named by Hub reference from a stand-in for the Hub (tests/hub_standin.py, on
127.0.0.1: no machine here reaches the real one) and run it with a real llama-server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from sqlalchemy.orm import Session

from farm.settings import load_settings
from farm.store.db import make_engine
from farm.store.models import Run
from tests.e2e.test_fleet import Fleet, shared_redis_fleet, wait_for
from tests.helpers import COPY_PROMPT
from tests.hub_standin import (
    COMMIT,
    FILE,
    GATED,
    REPO,
    SPLIT,
    SPLIT_FIRST,
    HubStandin,
    hub,
    shards,
    smol_gguf,
)
from workers.paths import NodePaths, file_sha256
from workers.setup.manifests import load_manifest
from workers.setup.provision import provision

pytestmark = pytest.mark.server
FARM = str(Path(sys.executable).with_name("farm"))
__all__ = ["hub", "shards", "smol_gguf"]  # the stand-in's fixtures, used by name


@pytest.fixture(scope="session")
def cpu_server() -> Path:
    """The node's `cpu` llama-server as registered (`farm provision` makes it once; a build
    already there is used as it is: these tests are about models)."""
    paths = NodePaths.of(load_settings())
    manifest = load_manifest("cpu", paths)
    return Path(manifest.server) if manifest else provision(paths).server


def _matrix(path: Path, campaign: str, model: dict[str, Any], classes: list[str] | None = None,
            variants: tuple[str, ...] = ("ngram-simple",)) -> Path:
    path.write_text(yaml.safe_dump({
        "campaign": campaign, **({"gpu-classes": classes} if classes else {}),
        "models": [{"name": "smol", **model}], "prompts": [COPY_PROMPT], "n-predict": 16,
        "repetitions": 1, "pairs": 1, "max-pairs": 1,
        "flags": {"ctx-size": 1024, "threads": 1},
        "variants": [{"name": t, "flags": {"spec-type": t}} for t in variants]}))
    return path


def _farm_run(matrix: Path, hub: HubStandin, cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "HF_ENDPOINT": hub.url, "FARM_MODELS_DIR": str(cache / "models")}
    return subprocess.run([FARM, "run", str(matrix)], capture_output=True, text=True,
                          env=env, timeout=600, check=False)


def test_farm_run_downloads_a_hub_model_once_and_runs_it_and_its_draft_model(
        hub: HubStandin, tmp_path: Path, cpu_server: Path, smol_gguf: Path,
        isolated_data_dir: Path) -> None:
    matrix = _matrix(tmp_path / "m.yaml", "hub-run", {"hf": REPO, "file": FILE})
    data = yaml.safe_load(matrix.read_text())
    data["draft-models"] = [{"name": "drafter", "hf": REPO, "file": FILE, "revision": COMMIT}]
    data["variants"].append({"name": "draft", "flags": {"spec-type": "draft-simple",
                                                         "spec-draft-model": "drafter"}})
    matrix.write_text(yaml.safe_dump(data))
    first = _farm_run(matrix, hub, tmp_path)
    assert first.returncode == 0, first.stderr
    assert f"model smol: {REPO}@main is commit {COMMIT}" in first.stderr
    assert re.search(rf"model smol: {FILE}: done, sha256 checked \(98.4 MB fetched\)",
                     first.stderr), first.stderr
    again = _farm_run(matrix, hub, tmp_path)  # the same jobs: done, and the file is here
    assert again.returncode == 0, again.stderr
    assert hub.gets[f"{REPO}/{FILE}"] == 1 and "downloading" not in again.stderr
    engine = make_engine(f"sqlite:///{isolated_data_dir / 'farm.db'}")
    with Session(engine) as session:
        runs = list(session.scalars(select(Run)))
    engine.dispose()
    assert len(runs) == 4 and {run.model_sha256 for run in runs} == {file_sha256(smol_gguf)}
    assert {run.model_file for run in runs} == {FILE}
    assert {run.model_source for run in runs} == {f"{REPO}@{COMMIT}"}
    place = str(tmp_path / "models" / "hub" / REPO.replace("/", "--") / COMMIT / FILE)
    drafted = [run.argv for run in runs if "--spec-draft-model" in run.argv]
    assert drafted and all(argv[argv.index("--spec-draft-model") + 1] == place
                           for argv in drafted)


def test_a_split_gguf_from_the_hub_loads_in_llama_server(
        hub: HubStandin, tmp_path: Path, cpu_server: Path) -> None:
    matrix = _matrix(tmp_path / "m.yaml", "hub-split", {"hf": SPLIT, "file": SPLIT_FIRST})
    result = _farm_run(matrix, hub, tmp_path)
    assert result.returncode == 0, result.stderr
    assert all(hub.gets[f"{SPLIT}/smol-0000{i}-of-00003.gguf"] == 1 for i in (1, 2, 3))


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, smol_gguf: Path, hub: HubStandin,
          ) -> Iterator[Fleet]:
    with shared_redis_fleet(tmp_path, smol_gguf, postgres_url) as fleet:
        fleet.env["HF_ENDPOINT"] = hub.url
        yield fleet


def _log_times(log: str) -> list[str]:
    return [line[:23] + " " + line.split("]", 1)[-1].strip()[:110] for line in log.splitlines()
            if re.search(r"Task .* received|model smol|waiting for another download|"
                         r"succeeded in", line)]


def test_two_workers_on_one_box_download_once_and_both_run(
        fleet: Fleet, hub: HubStandin, cpu_server: Path) -> None:
    for name in ("alpha", "beta"):
        fleet.start_worker(name, "box", cpu_server)
    matrix = _matrix(fleet.root / "m.yaml", "hub-fleet", {"hf": REPO, "file": FILE}, ["box"],
                     ("ngram-simple", "ngram-mod"))
    submitted = fleet.farm("submit", str(matrix))
    assert submitted.returncode == 0, submitted.stderr
    wait_for(lambda: all(job.state in ("done", "failed") for job in fleet.jobs()), 300,
             "both jobs")
    jobs = fleet.jobs()
    assert [job.state for job in jobs] == ["done", "done"], [job.error for job in jobs]
    assert {job.lease_owner for job in jobs} == {"alpha", "beta"}
    assert all(job.spec["model"]["revision"] == COMMIT for job in jobs)
    assert hub.gets[f"{REPO}/{FILE}"] == 1, "one download for two workers"
    print("\ntimeline:\n" + "\n".join(_log_times(fleet.logs())))


def test_a_gated_model_every_worker_refused_fails_with_their_reasons(
        fleet: Fleet, hub: HubStandin, cpu_server: Path) -> None:
    token = hub.repos[GATED].token or ""
    for name in ("one", "two"):
        fleet.start_worker(name, "box", cpu_server)
    matrix = _matrix(fleet.root / "m.yaml", "hub-gated", {"hf": GATED, "file": FILE}, ["box"])
    # The coordinator has the token and pins the revision; the workers have none.
    pinned = subprocess.run([FARM, "submit", str(matrix)], capture_output=True, text=True,
                            env={**fleet.env, "HF_TOKEN": token}, timeout=300, check=False)
    assert pinned.returncode == 0, pinned.stderr
    wait_for(lambda: all(job.state == "failed" for job in fleet.jobs()), 300, "the job to fail")
    (job,) = fleet.jobs()
    assert job.failure_class == "model_unavailable" and set(job.refusals) == {"one", "two"}
    assert (job.error or "").startswith("every live worker of class box refused it: one: ")
    assert "this node has no token" in (job.error or "") and "HF_TOKEN" in (job.error or "")
    assert hub.gets[f"{GATED}/{FILE}"] == 0


def test_prepare_downloads_ahead_and_an_offline_node_then_runs_from_what_it_has(
        hub: HubStandin, tmp_path: Path, cpu_server: Path) -> None:
    matrix = _matrix(tmp_path / "m.yaml", "hub-prepare", {"hf": REPO, "file": FILE})
    env = {**os.environ, "HF_ENDPOINT": hub.url, "FARM_MODELS_DIR": str(tmp_path / "models")}
    prepared = subprocess.run([FARM, "prepare", str(matrix)], capture_output=True, text=True,
                              env=env, timeout=300, check=False)
    assert prepared.returncode == 0, prepared.stderr
    assert "ready on this node: 1 job, models smol" in prepared.stdout
    offline = {**env, "HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"}
    dry = subprocess.run([FARM, "run", "--dry-run", str(matrix)], capture_output=True,
                         text=True, env=offline, timeout=300, check=False)
    assert dry.returncode == 0, dry.stderr
    assert f"offline, revision main is commit {COMMIT} as pinned on this node" in dry.stderr
    place = tmp_path / "models" / "hub" / REPO.replace("/", "--") / COMMIT / FILE
    assert f"--model {place}" in dry.stdout and "not on this machine" not in dry.stdout
    assert hub.gets[f"{REPO}/{FILE}"] == 1
