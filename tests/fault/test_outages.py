"""Outages that pass: the Hub answering 503 for 60 s (here), a git source stopped for 60 s
(tests/fault/test_git_outage.py). A real worker meets each on a job's model or build,
tries again within the job, hands the job back for later without refusing it
(``job.deferrals``), and the job finishes once the source is back. Each prints its
timeline."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_fleet import FARM, Fleet, wait_for
from tests.e2e.test_hub_models import fleet
from tests.helpers import COPY_PROMPT
from tests.hub_standin import COMMIT, FILE, REPO, HubStandin, hub, shards, smol_gguf
from workers.setup.provision import Provisioned

# Fixtures used by name: the stand-in's, and a fleet whose nodes reach it.
__all__ = ["fleet", "hub", "shards", "smol_gguf"]
# Waits: a minute of outage each, beside the shared phase (tests/run).
pytestmark = [pytest.mark.server, pytest.mark.waits]
OUTAGE = 60.0


def start_worker(fleet: Fleet, config: dict[str, object]) -> None:
    path = fleet.root / "worker.yaml"
    path.write_text(yaml.safe_dump({"name": "alpha", "gpu-class": "box",
                                    "models-dir": str(fleet.models), **config}))
    log = (fleet.root / "alpha.log").open("wb")
    fleet.workers["alpha"] = subprocess.Popen(
        [FARM, "worker", "--config", str(path)], env=fleet.env, stdout=log,
        stderr=subprocess.STDOUT, start_new_session=True)
    wait_for(lambda: " live " in fleet.farm("workers").stdout, 60, "the worker to register")


def outage_matrix(fleet: Fleet, campaign: str, **entries: object) -> Path:
    path = fleet.root / f"{campaign}.yaml"
    path.write_text(yaml.safe_dump({
        "campaign": campaign, "gpu-classes": ["box"], "prompts": [COPY_PROMPT],
        "n-predict": 16, "repetitions": 1, "pairs": 1, "max-pairs": 1,
        "flags": {"ctx-size": 1024, "threads": 1},
        "variants": [{"name": "ngram", "flags": {"spec-type": "ngram-simple"}}], **entries}))
    return path


def finished(fleet: Fleet, started: float) -> tuple[str, int, dict[str, str], float]:
    wait_for(lambda: all(job.state in ("done", "failed") for job in fleet.jobs()), 420,
             "the job")
    [job] = fleet.jobs()
    took = time.monotonic() - started
    timeline = [f"{line[:23]} {line.split(']', 1)[-1].strip()[:150]}"
                for line in fleet.logs().splitlines()
                if re.search(r"Task .* received|trying again|handed back|succeeded in|"
                             r"done, sha256|builds made", line)]
    print(f"\ntimeline ({took:.0f} s after the outage began):\n" + "\n".join(timeline))
    return job.state, job.deferrals, job.refusals, took


def test_a_hub_answering_503_for_a_minute_delays_the_job_and_it_finishes(
        fleet: Fleet, hub: HubStandin, provisioned: Provisioned) -> None:
    fleet.env["FARM_DOWNLOADS_DIR"] = str(fleet.root / "downloads")
    start_worker(fleet, {"builds": {"cpu": str(provisioned.server)}})
    matrix = outage_matrix(fleet, "hub-outage", models=[{"name": "smol", "hf": REPO, "file": FILE}])
    # The revision pinned while the Hub answers; then the outage, and the submit pins from
    # that record (offline), as a coordinator that pinned it before would.
    assert fleet.farm("submit", "--dry-run", str(matrix)).returncode == 0
    started = time.monotonic()
    hub.down_until = started + OUTAGE
    submitted = subprocess.run([FARM, "submit", str(matrix)], capture_output=True, text=True,
                               env={**fleet.env, "HF_HUB_OFFLINE": "1"}, check=False)
    assert submitted.returncode == 0, submitted.stderr
    state, deferrals, refusals, took = finished(fleet, started)
    assert (state, refusals) == ("done", {}), fleet.logs()[-3000:]
    # Tried within the job (about 35 s), then handed back for 30 s: done after the outage.
    assert deferrals >= 1 and hub.down >= 4 and took > OUTAGE
    assert hub.gets[f"{REPO}/{FILE}"] == 1
    assert fleet.jobs()[0].spec["model"]["revision"] == COMMIT

