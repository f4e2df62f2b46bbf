"""A bisect on the fleet, for real: `farm bisect --submit` over three commits of a local
llama.cpp repository (the provisioned sdist's tree; the second plants 10 ms of sleep in
every draft call, the third adds a README line), each step's job built and measured by two
real `farm worker` processes while the coordinator waits on PostgreSQL. The coordinator is
killed (SIGKILL) while its first step runs; the same command then resumes: the running
job is not submitted twice, and the answer names the planted commit. Each step's job runs
the variant's flags on good and on the commit, two builds in one job. It runs beside other
tests: its servers at one thread, one at a time (each step waits for its job), the planted
cost several times the draft's own so that a neighbour's noise does not hide it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.e2e import planted
from tests.e2e.test_fleet import FARM, shared_redis_fleet, wait_for
from tests.e2e.test_source_builds import Box
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server


@pytest.fixture
def three_commits(provisioned: Provisioned, tmp_path: Path) -> tuple[Path, list[str]]:
    """c0 the sdist; c1 10 ms per draft call; c2 a README line."""
    repo = tmp_path / "git" / "llama.cpp"
    commits = [planted.sdist_repository(repo, "c0: b11434 from the sdist")]
    commits += planted.cost_then_readme(repo, "c1: 10 ms more per speculative round",
                                        "c2: a README line", ms=10)
    return repo, commits


@pytest.fixture
def box(tmp_path: Path, postgres_url: str, smollm2: Path,
        provisioned: Provisioned) -> Iterator[Box]:
    with shared_redis_fleet(tmp_path, smollm2, postgres_url) as fleet:
        (fleet.models / "oracle-cpu.gguf").hardlink_to(
            provisioned.models["qwen35-mtp-oracle-cpu"])
        yield Box(fleet, tmp_path / "box-cache")


def _matrix(box: Box, url: str) -> Path:
    # As tests/e2e/test_bisect.py's (planted.nightly_matrix), by file in the workers'
    # models dir and on their class, one repetition a block at one thread (the planted cost
    # is several times the draft timer: the fleet's mechanics are tested here, not the
    # decisions' power).
    path = box.fleet.root / "nightly.yaml"
    path.write_text(yaml.safe_dump({
        "campaign": "nightly", "gpu-classes": ["box"], "prompt-mode": "completion",
        "build": {"name": "master", "git": url, "ref": "master"},
        "models": [{"name": "oracle-cpu", "file": "oracle-cpu.gguf"}],
        "prompts": ["hello speculative world", "the fleet finds the commit"],
        "n-predict": 64, "repetitions": 1, "pairs": 4, "max-pairs": 4,
        "flags": {"ctx-size": 256, "threads": 1},
        "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp",
                                               "spec-draft-n-max": 3}}]}))
    return path


def test_a_bisect_submitted_to_the_fleet_survives_its_coordinator_and_finds_the_commit(
        box: Box, three_commits: tuple[Path, list[str]]) -> None:
    repo, commits = three_commits
    url = f"file://{repo}"
    box.start("one", [url])
    box.start("two", [url])
    # The workers fetch the URL; the coordinator lists the commits in its clone.
    command = [FARM, "bisect", str(_matrix(box, url)), "--good", commits[0], "--bad",
               "master", "--clone", str(repo), "--series", "draft", "--submit",
               "--format", "json"]
    started = time.monotonic()
    first = subprocess.Popen(command, env=box.fleet.env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: any(job.state == "running" for job in box.fleet.jobs()), 300,
                 "the first step's job to run on a worker")
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    [running] = box.fleet.jobs()
    again = subprocess.run(command, env=box.fleet.env, capture_output=True, text=True,
                           timeout=900, check=False)
    seconds = time.monotonic() - started
    assert again.returncode == 0, again.stderr[-3000:]
    print(f"\nfleet bisect: {seconds:.0f} s\n{again.stderr}")
    answer = json.loads(again.stdout)
    [draft] = answer["series"]
    assert draft["steps"][0]["verdict"] == "differ"
    # As in tests/e2e/test_bisect.py: c1 is first, like bad.
    assert draft["answer"] == "found" and draft["first_bad"]["commit"] == commits[1]
    jobs = box.fleet.jobs()
    # The variant arm on good against it on bad (twice: the ends replicate) and on c1 (and
    # a later round's, ``NAME.2``, where a step was too close to call), each once, run by
    # the workers: the job running when the coordinator died was waited for, not
    # submitted again.
    steps = {f"nightly.bisect.{commits[0][:12]}-{commit[:12]}.variant" for commit in
             commits[1:]}
    campaigns = [job.spec["campaign"] for job in jobs]
    assert len(set(campaigns)) == len(campaigns) and jobs[0].id == running.id
    assert steps <= set(campaigns)
    assert all(name.removesuffix(".2").removesuffix(".3") in steps for name in campaigns)
    assert [(job.state, job.attempt) for job in jobs] == [("done", 1)] * len(jobs)
    assert {job.lease_owner for job in jobs} <= {"one", "two"}
    assert (f"nightly.bisect.{commits[0][:12]}-{commits[2][:12]}.variant: on the workers "
            "of class box") in again.stderr
