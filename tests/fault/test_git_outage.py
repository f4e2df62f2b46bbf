"""A git source stopped for 60 s: a real worker meets the outage on a job's build, tries
again within the job, hands the job back for later without refusing it
(``job.deferrals``), and the job finishes once the source is back (the Hub's outage:
tests/fault/test_outages.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.e2e import planted
from tests.e2e.test_fleet import Fleet
from tests.e2e.test_hub_models import fleet
from tests.e2e.test_source_builds import git_daemon
from tests.fault.test_outages import OUTAGE, finished, outage_matrix, start_worker
from tests.hub_standin import hub, shards, smol_gguf
from workers.setup.provision import Provisioned

# Fixtures used by name: a fleet (built on the Hub stand-in's fixtures).
__all__ = ["fleet", "hub", "shards", "smol_gguf"]
pytestmark = [pytest.mark.server, pytest.mark.waits]


def test_a_git_source_stopped_for_a_minute_delays_the_job_and_it_finishes(
        fleet: Fleet, provisioned: Provisioned, tmp_path: Path) -> None:
    fleet.env["FARM_CACHE_DIR"] = str(tmp_path / "cache")  # its clone and build, not the node's
    served = tmp_path / "served"
    served.mkdir()
    commit = planted.bare_sdist_repository(tmp_path / "work", served)
    daemon, port = git_daemon(served)
    url = f"git://127.0.0.1:{port}/repo.git"
    try:
        daemon.terminate()
        daemon.wait()
        started = time.monotonic()
        start_worker(fleet, {"sources": [url]})
        # A full commit id needs no lookup at submit: the worker meets the outage.
        matrix = outage_matrix(fleet, "git-outage", build={"name": "pr", "git": url, "ref": commit},
                         models=[{"name": "smollm2", "file": "smollm2.gguf"}])
        submitted = fleet.farm("submit", str(matrix))
        assert submitted.returncode == 0, submitted.stderr
        time.sleep(max(0.0, started + OUTAGE - time.monotonic()))
        daemon, _ = git_daemon(served, port)
        state, deferrals, refusals, took = finished(fleet, started)
    finally:
        daemon.terminate()
        daemon.wait()
    assert (state, refusals) == ("done", {}), fleet.logs()[-3000:]
    assert deferrals >= 1 and took > OUTAGE
    assert fleet.jobs()[0].spec["baseline"]["build"]["source"]["commit"] == commit
