"""`stop: natural` on a real server: at temperature 0 both arms stop where the model does,
after the same tokens, so they do the same work."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.e2e.test_farm_run import farm
from tests.helpers import COPY_PROMPT, matrix_dict, write_matrix

pytestmark = pytest.mark.server
N_PREDICT = 96


def test_natural_stop_pairs_produce_identical_tokens_at_temperature_zero(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    prompts = [{"id": "copy", "category": "rewrite", "text": COPY_PROMPT},
               {"id": "capital", "category": "qa",
                "text": "What is the capital of France? Answer in one word."}]
    matrix = matrix_dict(smollm2, prompts=prompts, stop="natural", repetitions=1,
                         **{"n-predict": N_PREDICT})
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        runs = db.execute("select arm, prompt_id, generated_tokens, tokens from run").fetchall()
        [summary] = db.execute("select summary from job").fetchone()
    by_arm = {(arm, prompt): (count, json.loads(tokens)) for arm, prompt, count, tokens in runs}
    assert len(by_arm) == 4
    for prompt in ("copy", "capital"):
        assert by_arm["variant", prompt] == by_arm["baseline", prompt]
    # The one-word answer ends long before the cap: EOS was not ignored.
    assert by_arm["baseline", "capital"][0] < N_PREDICT / 4
    found = json.loads(summary)
    assert found["stop_mismatch"] == 0 and found["agreement"] == 1.0
