"""The farm's real subject: baseline vs draft-mtp on generated MTP models, known answers.

By construction the oracle's drafts are all right (acceptance 1.0) and the anti-oracle's all
wrong (none accepted at any position), both with the baseline's text (one trunk); so are the
CPU oracle's, at a size where drafting pays (its speed: tests/bench/bench_oracle.py); SmolLM2
has no MTP heads. The tutorial's old command line is translated. The generated models are
pinned by sha256, so these answers hold on every machine.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.test_farm_run import farm, report_rows
from tests.helpers import matrix_dict, write_matrix
from workers.paths import NodePaths, file_sha256
from workers.setup.mtp_oracles import ANTI_ORACLE_NAME, CPU_ORACLE_NAME, ORACLE_NAME
from workers.setup.provision import (
    PINNED_SHA256,
    QWEN35_NAME,
    Provisioned,
    generate_cpu_oracle,
    generate_mtp_twins,
    generate_qwen35,
)

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


@pytest.mark.alone
def test_tutorial_command_line_runs_mtp_with_known_answers(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    """Alone: the tutorial's command line as written runs its servers at two threads."""
    models = [{"name": "oracle", "path": str(provisioned.models["qwen35-mtp-oracle"])},
              {"name": "anti", "path": str(provisioned.models["qwen35-mtp-anti"])}]
    result = farm("run", str(write_matrix(tmp_path, _tutorial(models))))
    assert result.returncode == 0, result.stderr
    rows = {row["model"]: row for row in report_rows()}
    oracle, anti = rows["oracle"], rows["anti"]
    assert oracle["drafted"] > 0 and oracle["acceptance_rate"] == 1.0
    assert anti["drafted"] > 0 and anti["accepted"] == 0
    assert oracle["speculation"] == anti["speculation"] == "ok"

    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        translations = {model: json.loads(text) for model, text in db.execute(
            "select model_name, translations from job")}
        texts = db.execute("select run.text from run").fetchall()
        argv = json.loads(db.execute("select argv from run where arm = 'variant'").fetchone()[0])
        per_pos = {model: [json.loads(counts) for (counts,) in db.execute(
            "select spec_accepted_per_pos from run join job on job.id = run.job_id "
            "where arm = 'variant' and model_name = ?", (model,))] for model in rows}
        heads = db.execute("select nextn_layers from model where file_name = "
                           "'qwen35-mtp-oracle.gguf'").fetchone()[0]
    assert translations["oracle"] == [
        "variant: --spec-type mtp -> draft-mtp (renamed upstream)",
        # The matrix wrote --draft-max: one spelling of the build's removed --draft.
        "variant: --draft -> --spec-draft-n-max (removed in this build)"]
    assert argv[-4:] == ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]
    assert len(set(texts)) == 1  # one trunk: every arm of both models writes the same text
    assert all(sum(counts) > 0 for counts in per_pos["oracle"]) and heads == 1
    assert per_pos["anti"] and all(not any(counts) for counts in per_pos["anti"])


def test_cpu_oracle_accepts_every_draft_with_the_baseline_s_text(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    matrix = {"campaign": "cpu-oracle", "prompt-mode": "completion",
              "models": [{"name": "oracle-cpu",
                          "path": str(provisioned.models["qwen35-mtp-oracle-cpu"])}],
              "prompts": ["hello speculative world"], "n-predict": 48, "repetitions": 1,
              "pairs": 1, "max-pairs": 1, "flags": {"ctx-size": 256, "threads": 1},
              "variants": [{"name": "mtp", "flags": {"spec-type": "draft-mtp",
                                                     "spec-draft-n-max": 3}}]}
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr
    [row] = report_rows()
    assert row["drafted"] > 0 and row["acceptance_rate"] == 1.0
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        texts = db.execute("select arm, text from run").fetchall()
    assert {arm for arm, _ in texts} == {"baseline", "variant"}
    assert len({text for _, text in texts}) == 1


def test_a_cached_model_without_its_pinned_hash_is_generated_again(
        tmp_path: Path, provisioned: Provisioned, node_paths: NodePaths) -> None:
    node = replace(node_paths, models_dir=tmp_path)
    paths = [tmp_path / name
             for name in (QWEN35_NAME, ORACLE_NAME, ANTI_ORACLE_NAME, CPU_ORACLE_NAME)]
    for path in paths:
        path.write_bytes(b"made when test-llama-archs drew a random seed")
    assert generate_qwen35(provisioned.archs_tool, node) == paths[0]
    assert generate_mtp_twins(paths[0], node) == (paths[1], paths[2])
    assert generate_cpu_oracle(paths[0], node) == paths[3]
    for path in paths:  # made again, in another dir: the same bytes as the provisioned ones
        assert file_sha256(path) == PINNED_SHA256[path.name]


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
