"""`farm tune` on the real llama-server: a two-setting race on the MTP oracle (one thread,
few tokens) answers with its rounds stored as ordinary campaigns, and the same command
answers again from the store without running anything. It asserts the race's mechanics
and output, not which setting wins (the statistics: tests/unit/test_race.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.test_farm_run import farm, report_rows
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server


def test_farm_tune_races_two_settings_stores_its_rounds_and_resumes_from_the_store(
        provisioned: Provisioned, isolated_data_dir: Path) -> None:
    oracle = provisioned.models["qwen35-mtp-oracle-cpu"]
    args = ("tune", str(oracle), "--spec-type", "draft-mtp", "--space",
            "spec-draft-n-max=1,3", "--prompt-mode", "completion", "--n-predict", "16",
            "--repetitions", "1", "--prompt-suite", "extraction", "-t", "1",
            "--args", "-c 1024", "--budget", "12")
    dry = farm(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "2 candidates" in dry.stdout and "spec-draft-n-max=3" in dry.stdout
    assert [path.suffix for path in (isolated_data_dir / "tune").iterdir()] == [".yaml"]

    result = farm(*args, "--format", "json")
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    labels = {"spec-draft-n-max=1", "spec-draft-n-max=3"}
    assert answer["candidates"] == 2 and answer["named"]["candidate"] in labels
    assert answer["stop"] in ("one-left", "leader-within", "fair-choice", "budget")
    assert 8 <= answer["pairs"] <= 12 and answer["seconds"] > 0
    assert answer["named"]["low"] <= answer["named"]["speedup"] <= answer["named"]["high"]
    survivors = {row["candidate"] for row in answer["survivors"]}
    assert survivors | {row["candidate"] for row in answer["dropped"]} == labels
    runs = 0
    for campaign in answer["round_campaigns"]:
        rows = report_rows(campaign)
        assert rows and all(row["state"] == "done" for row in rows)
        runs += sum(row["runs"] for row in rows)
    assert runs == answer["pairs"] * 2 * 6  # two arms, six prompts, one repetition

    again = farm(*args, "--format", "json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout) == answer
    assert "round 1" not in again.stderr  # every round read from the store
