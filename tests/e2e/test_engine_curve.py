"""The engine cost curve end to end: an ``engine-curve`` matrix on the tiny MTP oracle runs
as synthetic-acceptance jobs, and ``farm curve`` fits them (JSON, table, plot).

The ends of each curve are known by construction: synth-len 1 accepts no draft (length
exactly 1) and synth-len n-max + 1 every draft (length n-max + 1, less the drafts a run's
token budget cuts short).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.e2e.test_farm_run import farm
from tests.helpers import write_matrix
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server


def test_engine_curve_campaign_runs_and_farm_curve_fits_it(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    matrix = {
        "campaign": "curve", "prompt-mode": "completion",
        "models": [{"name": "oracle", "path": str(provisioned.models["qwen35-mtp-oracle"])}],
        "prompts": ["one two three", "the farm reads"],
        "n-predict": 96, "repetitions": 2, "pairs": 2, "max-pairs": 2,
        "flags": {"ctx-size": 256, "threads": 1},
        "engine-curve": {"spec-type": "draft-mtp", "draft-n-max": [1, 2],
                         "synth-len": [1, 1.5, 2, 3]},
    }
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr
    assert "synthetic (engine cost)" in result.stdout

    plot = tmp_path / "curve.png"
    result = farm("curve", "--format", "json", "--plot", str(plot))
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    points, curves = found["points"], found["curves"]
    # n-max 1 reaches lengths 1, 1.5 and 2; n-max 2 all four.
    assert sorted((p["draft_n_max"], p["synth_len"]) for p in points) == [
        (1, 1.0), (1, 1.5), (1, 2.0), (2, 1.0), (2, 1.5), (2, 2.0), (2, 3.0)]
    for point in points:
        if point["synth_len"] == 1.0:
            assert point["acceptance_length"] == 1.0
        elif point["synth_len"] == point["draft_n_max"] + 1:
            # Every draft accepted, but a run's token budget may cut its last one short.
            assert point["synth_len"] - 0.1 < point["acceptance_length"] <= point["synth_len"]
        assert point["speedup"] > 0
        assert point["step_cost"] == pytest.approx(point["acceptance_length"] / point["speedup"])
    assert [(c["draft_n_max"], c["points"]) for c in curves] == [(1, 3), (2, 4)]
    for curve in curves:
        assert curve["spec_type"] == "draft-mtp" and curve["model"] == "oracle"
        assert curve["length_min"] == 1.0
        assert curve["step_cost"] is None or curve["step_cost"] > 0  # null: line <= 0 at k+1
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    table = farm("curve", "curve")
    assert table.returncode == 0, table.stderr
    assert "engine cost curve" in table.stdout and "break-even length" in table.stdout
    page = tmp_path / "report.html"
    assert farm("report", "--format", "html", "-o", str(page)).returncode == 0
    assert "Engine cost curve (synthetic acceptance)" in page.read_text(encoding="utf-8")


def test_farm_curve_without_synthetic_jobs_says_how_to_get_them(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    matrix = {
        "campaign": "plain", "prompt-mode": "completion",
        "models": [{"name": "oracle", "path": str(provisioned.models["qwen35-mtp-oracle"])}],
        "prompts": ["one two three"], "n-predict": 16, "repetitions": 1, "pairs": 1,
        "max-pairs": 1, "flags": {"ctx-size": 256, "threads": 1},
        "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp"}}],
    }
    assert farm("run", str(write_matrix(tmp_path, matrix))).returncode == 0
    result = farm("curve")
    assert result.returncode != 0
    assert "engine-curve" in result.stderr and "Traceback" not in result.stderr


def test_recommend_on_real_runs_writes_a_verification_that_check_reads(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    """The tiny oracle accepts every draft: farm recommend answers from the curve and the
    drafter's runs, and its verification matrix must run and be checked."""
    model = {"name": "oracle", "path": str(provisioned.models["qwen35-mtp-oracle"])}
    common = {"prompt-mode": "completion", "models": [model],
              "prompts": [{"id": "a", "text": "one two three", "category": "code"},
                          {"id": "b", "text": "the farm reads", "category": "chat"}],
              "n-predict": 96, "repetitions": 2, "pairs": 2, "max-pairs": 2,
              "flags": {"ctx-size": 256, "threads": 1}}
    curve = {"campaign": "curve", **common, "engine-curve": {
        "spec-type": "draft-mtp", "draft-n-max": [1, 2], "synth-len": [1, 1.5, 2, 3]}}
    drafter = {"campaign": "drafter", **common, "variants": [
        {"name": "mtp", "flags": {"spec-type": "draft-mtp", "spec-draft-n-max": 2}}]}
    for matrix in (curve, drafter):
        result = farm("run", str(write_matrix(tmp_path, matrix, f"{matrix['campaign']}.yaml")))
        assert result.returncode == 0, result.stderr
    verify = tmp_path / "verify.yaml"
    result = farm("recommend", "drafter", "--format", "json", "--write-matrix", str(verify))
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    assert {row["category"] for row in found["recommendations"]} == {"(all)", "chat", "code"}
    # The tiny oracle's drafting costs about what it saves on a CPU, so which side of 1 a
    # short campaign lands on is the machine's call; the answer must be one of the two.
    # Each category holds one prompt, and prompts are acceptance's clusters: a category's
    # acceptance length has no error, so it gets no prediction.
    choices = {f"spec-type=draft-mtp spec-draft-n-max={k}" for k in (1, 2)}
    answers = {row["category"]: row["recommended"] for row in found["recommendations"]}
    assert answers["(all)"] in choices | {"no speculation", "no clear gain"}, answers
    assert answers["chat"] == answers["code"] == "insufficient data", answers
    assert all("break-even" in row["why"] for row in found["recommendations"])
    assert {row["draft_n_max"] for row in found["candidates"]} == {1, 2}
    # Every draft right, less the last drafts a run's token budget cuts short.
    assert all(min(row["rates"]) >= 0.95 for row in found["candidates"])
    # The verification matrix is a matrix like any other; a short design keeps this quick.
    matrix = yaml.safe_load(verify.read_text(encoding="utf-8"))
    matrix.update({"pairs": 2, "max-pairs": 2})
    result = farm("run", str(write_matrix(tmp_path, matrix, "verify-short.yaml")))
    assert result.returncode == 0, result.stderr
    result = farm("recommend", "drafter", "--check", "drafter-verify", "--format", "json")
    assert result.returncode == 0, result.stderr
    rows = json.loads(result.stdout)
    assert {(row["category"], row["draft_n_max"]) for row in rows} >= {("(all)", 1),
                                                                       ("(all)", 2)}
    assert all(row["verdict"] in ("inside", "within 5%", "off") for row in rows)
