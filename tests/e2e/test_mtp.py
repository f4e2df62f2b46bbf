"""The farm's real subject: baseline vs draft-mtp on generated MTP models, known answers.

The oracle's drafts are all right (acceptance 1.0, the baseline's text), the random twin's
all wrong (0.0); SmolLM2 has no MTP heads. The tutorial's old command line is translated.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_farm_run import farm, report_rows
from tests.helpers import matrix_dict, write_matrix
from workers.provision import Provisioned

pytestmark = pytest.mark.server
# The tutorial's flags, less the ones the farm owns (-np, host, port, --metrics).
TUTORIAL_BASE = "-ngl 99 -c 256 --cache-type-k q8_0 --cache-type-v q8_0 -b 2048 -ub 512 -t 2 -fa on"
TUTORIAL_MTP = "--spec-type mtp --draft-max 3"


def _tutorial(models: list[dict[str, str]]) -> dict[str, Any]:
    return {"campaign": "tutorial", "models": models, "prompt-mode": "completion",
            "prompts": ["hello speculative world"], "n-predict": 64, "repetitions": 2,
            "pairs": 1, "max-pairs": 1,
            "args": TUTORIAL_BASE, "variants": [{"name": "mtp", "args": TUTORIAL_MTP}]}


def test_tutorial_command_line_is_refused_for_a_model_without_mtp_heads(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    matrix = write_matrix(tmp_path, {**_tutorial([{"name": "smollm2", "path": str(smollm2)}]),
                                     "prompt-mode": "chat"})
    result = farm("run", str(matrix))
    assert result.returncode == 2
    assert "--spec-type draft-mtp needs MTP heads" in result.stderr
    assert "nextn_predict_layers is 0" in result.stderr
    assert not isolated_data_dir.exists()


def test_tutorial_command_line_runs_mtp_with_known_answers(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    models = [{"name": "oracle", "path": str(provisioned.models["qwen35-mtp-oracle"])},
              {"name": "random", "path": str(provisioned.models["qwen35-mtp-random"])}]
    result = farm("run", str(write_matrix(tmp_path, _tutorial(models))))
    assert result.returncode == 0, result.stderr
    rows = {row["model"]: row for row in report_rows()}
    oracle, random = rows["oracle"], rows["random"]
    assert oracle["drafted"] > 0 and oracle["acceptance_rate"] == 1.0
    assert random["drafted"] > 0 and random["acceptance_rate"] == 0.0
    assert oracle["speculation"] == random["speculation"] == "ok"

    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        translations = {model: json.loads(text) for model, text in db.execute(
            "select model_name, translations from job")}
        texts = db.execute("select job.model_name, run.arm, run.text from run join job "
                           "on job.id = run.job_id").fetchall()
        argv = json.loads(db.execute("select argv from run where arm = 'variant'").fetchone()[0])
        per_pos = db.execute("select spec_accepted_per_pos from run join job on job.id = "
                             "run.job_id where arm = 'variant' and model_name = 'oracle'"
                             ).fetchone()[0]
        heads = db.execute("select nextn_layers from model where file_name = "
                           "'qwen35-mtp-oracle.gguf'").fetchone()[0]
    assert translations["oracle"] == [
        "variant: --spec-type mtp -> draft-mtp (renamed upstream)",
        "variant: --draft-max -> --spec-draft-n-max (removed in this build)"]
    assert argv[-4:] == ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    assert len({text for model, _, text in texts if model == "oracle"}) == 1  # same text
    assert sum(json.loads(per_pos)) > 0 and heads == 1


def test_a_draft_model_with_another_vocabulary_is_refused(
        tmp_path: Path, smollm2: Path, qwen35_random: Path, isolated_data_dir: Path) -> None:
    variants = [{"name": "draft", "flags": {"spec-type": "draft-simple",
                                            "spec-draft-model": str(qwen35_random)}}]
    result = farm("run", str(write_matrix(tmp_path, matrix_dict(smollm2, variants=variants))))
    assert result.returncode == 2
    assert "does not share the target's vocabulary (128 tokens" in result.stderr
    assert not isolated_data_dir.exists()


def test_speculation_that_drafts_nothing_is_flagged_not_shown_as_a_speedup(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    # A 64-token lookup n-gram cannot match in a short context: asked for, never drafted.
    variants = [{"name": "never", "flags": {"spec-type": "ngram-simple",
                                            "spec-ngram-simple-size-n": 64}}]
    matrix = matrix_dict(smollm2, variants=variants, repetitions=1, **{"n-predict": 16})
    assert farm("run", str(write_matrix(tmp_path, matrix))).returncode == 0
    [row] = report_rows()
    assert row["speculation"] == "none" and row["drafted"] == 0
    assert row["speedup"] is None and row["baseline_tok_s"] > 0
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        rss, cpu = db.execute("select min(rss_mb), min(cpu_seconds) from run").fetchone()
    assert rss > 0 and cpu > 0
