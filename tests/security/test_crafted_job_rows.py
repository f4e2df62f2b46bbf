"""A job row is data: rows written straight into the job table and posted to a real worker
(real Redis, PostgreSQL, a `farm worker` process logged in as the worker role) are checked
with the same code as a matrix load, against the worker's own build, and fail as `config`
on their first attempt: no llama-server started, no file created, no program run."""

from __future__ import annotations

import copy
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
import yaml
from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from farm.store.models import Job
from tests.e2e.test_fleet import FARM, Fleet, shared_redis_fleet, wait_for
from tests.helpers import as_role
from tests.hub_standin import COMMIT, FILE, REPO, HubStandin, hub, shards, smol_gguf
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
__all__ = ["hub", "shards", "smol_gguf"]  # the stand-in's fixtures, used here


@pytest.fixture
def fleet(tmp_path: Path, postgres_url: str, smollm2: Path, hub: HubStandin,
          ) -> Iterator[Fleet]:
    with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
        fleet.env["HF_ENDPOINT"] = hub.url
        yield fleet



def _start_worker(fleet: Fleet, database_url: str, server: Path) -> subprocess.Popen[bytes]:
    config = fleet.root / "worker.yaml"
    config.write_text(yaml.safe_dump({"name": "guarded", "gpu-class": "guarded",
                                      "models-dir": str(fleet.models),
                                      "builds": {"cpu": str(server)}}))
    log = (fleet.root / "guarded.log").open("wb")
    process = subprocess.Popen([FARM, "worker", "--config", str(config)],
                               env={**fleet.env, "FARM_DATABASE_URL": database_url},
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    fleet.workers["guarded"] = process
    wait_for(lambda: " live " in fleet.farm("workers").stdout, 60, "the worker to register")
    return process


_BAD_FILES = {"dotdot": "../../../cache/builds/master/bin/llama-server", "absolute": "/x.gguf",
              "backslash": "a\\..\\x.gguf", "control": "x\x00.gguf", "dash": "-rf.gguf"}


def _crafted(root: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """name -> (what to change in a valid spec, what the failure must say)."""
    mcp = json.dumps({"pwn": {"command": "/bin/sh",
                              "args": ["-c", f"touch {root / 'pwned-mcp'}"]}})
    return {
        "mcp": ({"flags": [["mcp-servers-json", mcp], ["host", "0.0.0.0"]]},
                "--mcp-servers-json runs programs"),
        "tools-alias": ({"flags": [["ag", True]]}, "--agent runs programs"),
        "prompts-dir": ({"flags": [["log-prompts-dir", str(root / "prompts")]]},
                        "--log-prompts-dir writes files"),
        "model-url": ({"flags": [["mu", "http://127.0.0.1:1/x.gguf"]]},
                      "--model-url reaches the network"),
        "short-name-escape": ({"flags": [["mm", "/etc/hostname"]]},
                              "--mmproj '/etc/hostname' is an absolute path"),
        "flag-climbs": ({"flags": [["lora-scaled", "a.gguf:1,../../x.gguf:2"]]},
                        "--lora-scaled '../../x.gguf' climbs out of its folder"),
        "model-path-outside": ({"model": {"name": "m", "path": "/etc/hostname"}},
                               "model 'm' '/etc/hostname' is outside the models dir"),
        **{f"model-file-{name}": ({"model": {"name": "m", "file": file}}, "model.file: ")
           for name, file in _BAD_FILES.items()},
        **{f"url-file-{name}": ({"model": {"name": "m", "url": "http://127.0.0.1:1/x",
                                           "files": [{"name": file, "sha256": "0" * 64}]}},
                                "model.files.0.name: ") for name, file in _BAD_FILES.items()},
        **{f"draft-file-{name}": ({"draft_models": [{"name": "d", "hf": "o/n", "revision": "0"
                                                     * 40, "file": file}]},
                                  "draft_models.0.file: ") for name, file in _BAD_FILES.items()},
        # A Hub download's place (DOWNLOADS_DIR/hub/REPO/COMMIT/FILE) from the row: the
        # repository and the revision can climb no more than the file.
        "hub-repo-climbs": ({"model": {"name": "m", "hf": "../..", "revision": "0" * 40,
                                       "file": "x.gguf", "files": [{"name": "x.gguf",
                                                                    "sha256": "0" * 64}]}},
                            "model.hf: "),
        "hub-revision-climbs": ({"model": {"name": "m", "hf": "o/n", "revision": "../../x",
                                           "file": "x.gguf", "files": [{"name": "x.gguf",
                                                                        "sha256": "0" * 64}]}},
                                "is not pinned to a commit"),
        "control-character": ({"flags": [["alias", "a\x1bb"]]}, "control character"),
        "fork-option": ({"flags": [["turbo-knob", "3"]]}, "not on the farm's list"),
        "sampling": ({"sampling": {"temperature": 0.0, "seed": 1, "grammar": "root ::= x"}},
                     "the stored job spec is not valid"),
        # A stop rule no design runs: refused when the row is read, before a server starts.
        "stop-rule": ({"stop_rule": "forever"}, "the stored job spec is not valid"),
        "decision-pairs": ({"stop_rule": "decision", "pairs": 1, "max_pairs": 100},
                           "the stored job spec is not valid"),
    }


def test_crafted_job_rows_fail_as_config_and_start_nothing(
        fleet: Fleet, provisioned: Provisioned, postgres_url: str, worker_role: str) -> None:
    grant = fleet.farm("db", "grant-worker", worker_role)
    assert grant.returncode == 0, grant.stderr
    _start_worker(fleet, as_role(postgres_url, worker_role), provisioned.server)
    matrix = fleet.matrix("guarded", ["guarded"])
    assert fleet.farm("submit", str(matrix)).returncode == 0
    wait_for(lambda: fleet.jobs()[0].state == "done", 180, "the valid job to finish")
    [valid] = fleet.jobs()

    crafted = _crafted(fleet.root)
    with Session(fleet.engine) as session, session.begin():
        row = session.get_one(Job, valid.id)
        for name, (change, _) in crafted.items():
            spec = copy.deepcopy(row.spec)
            if "flags" in change:
                spec["variant"]["flags"] = [*spec["variant"]["flags"], *change["flags"]]
            spec.update({key: value for key, value in change.items() if key != "flags"})
            session.execute(insert(Job).values(
                campaign_id=row.campaign_id, job_key=f"crafted-{name}", spec=spec,
                comparable_key=None, model_name=row.model_name, build_name=row.build_name,
                variant_name=name, varying=row.varying, gpu_class=row.gpu_class,
                state="queued", attempt=0, max_attempts=3, translations=[]))
    # The worker's own heartbeat finds the unposted rows and posts them.
    wait_for(lambda: all(job.state in ("done", "failed") for job in fleet.jobs()), 120,
             "every crafted row to end")

    by_name = {job.variant_name: job for job in fleet.jobs() if job.id != valid.id}
    for name, (_, reason) in crafted.items():
        job = by_name[name]
        assert (job.state, job.failure_class, job.attempt) == ("failed", "config", 1), (
            name, job.error)
        assert job.error is not None and reason in job.error, (name, job.error)
        assert not (fleet.root / "data" / "logs" / job.job_key[:16]).exists(), name
    assert not (fleet.root / "pwned-mcp").exists() and not (fleet.root / "prompts").exists()
    # The valid job ran its servers (its block logs), and under the worker role.
    assert (fleet.root / "data" / "logs" / valid.job_key[:16]).is_dir()
    assert valid.lease_owner == "guarded"


def _hub_row(spec: dict[str, Any], hub: HubStandin, flags: list[list[Any]]) -> dict[str, Any]:
    """``spec`` on the stand-in's SmolLM2, pinned (so a worker downloads it), with ``flags``
    added to its variant."""
    model = {"name": "hubbed", "hf": REPO, "revision": COMMIT, "file": FILE,
             "files": [{"name": FILE, "sha256": hub.sha256(REPO, FILE)}]}
    return {**spec, "model": model,
            "variant": {**spec["variant"], "flags": [*spec["variant"]["flags"], *flags]}}


def test_a_refused_row_downloads_nothing_and_the_same_row_admitted_downloads(
        fleet: Fleet, provisioned: Provisioned, postgres_url: str, hub: HubStandin) -> None:
    _start_worker(fleet, postgres_url, provisioned.server)
    assert fleet.farm("submit", str(fleet.matrix("guarded", ["guarded"]))).returncode == 0
    wait_for(lambda: fleet.jobs()[0].state == "done", 180, "the valid job to finish")
    [valid] = fleet.jobs()
    rows = {"refused": [["tools", "exec_shell_command"]], "admitted": []}
    for name, flags in rows.items():
        with Session(fleet.engine) as session, session.begin():
            row = session.get_one(Job, valid.id)
            session.execute(insert(Job).values(
                campaign_id=row.campaign_id, job_key=f"hub-{name}",
                spec=_hub_row(row.spec, hub, flags), comparable_key=None,
                model_name="hubbed", build_name=row.build_name, variant_name=name,
                varying=row.varying, gpu_class=row.gpu_class, state="queued", attempt=0,
                max_attempts=3, translations=[]))
        wait_for(lambda: all(job.state in ("done", "failed") for job in fleet.jobs()), 240,
                 f"the {name} row to end")
        job = next(job for job in fleet.jobs() if job.variant_name == name)
        if name == "refused":
            assert (job.state, job.failure_class, job.attempt) == ("failed", "config", 1)
            assert job.error is not None and "--tools runs programs" in job.error
            assert not hub.gets and not hub.sent  # not a byte asked of the Hub
        else:
            assert job.state == "done", job.error
            assert hub.gets == {f"{REPO}/{FILE}": 1}


def test_the_worker_role_cannot_create_or_change_jobs(fleet: Fleet, postgres_url: str,
                                                      worker_role: str) -> None:
    assert fleet.farm("db", "grant-worker", worker_role).returncode == 0
    with psycopg.connect(as_role(postgres_url, worker_role), autocommit=True) as worker:
        for statement in ("INSERT INTO campaign (name, matrix_path) VALUES ('evil', 'x')",
                          "UPDATE job SET spec = '{}'", "DELETE FROM run",
                          "UPDATE campaign SET name = 'x'", "DROP TABLE run",
                          # a kept report row is written by reports only: a worker cannot
                          # print another job's names or figures through it
                          "UPDATE job SET report_row = '{}'",
                          "UPDATE job SET report_head = '{}'",
                          # nor a whole kept report (farm.results.printed)
                          "INSERT INTO report_text (scope, stamp, body) "
                          "VALUES ('all', 'x', '\\x5b5d')",
                          "UPDATE report_text SET body = body"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                worker.execute(statement)
        worker.execute("UPDATE job SET state = state")  # its own columns it may write
        assert worker.execute("SELECT count(*) FROM job").fetchone() is not None
    with Session(fleet.engine) as session:
        assert session.scalars(select(Job)).all() == []
