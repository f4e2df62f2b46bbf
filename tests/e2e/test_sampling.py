"""Sampling at temperature 0.7 against rejection-sampled speculation
(``--spec-draft-sampling probabilistic``): each run's seed is mixed from the matrix's, the
prompt and the repetition, the same in both arms; outputs need not match, so agreement does
not apply; the speedup keeps its interval over block pairs."""

from __future__ import annotations

import json
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest

from tests.e2e.test_farm_run import farm, report_rows
from tests.helpers import COPY_PROMPT, matrix_dict, write_matrix

pytestmark = pytest.mark.server


def test_sampled_job_seeds_both_arms_alike_and_keeps_its_interval(
        tmp_path: Path, smollm2: Path, isolated_data_dir: Path) -> None:
    prompts = [{"id": "copy", "category": "rewrite", "text": COPY_PROMPT},
               {"id": "poem", "category": "creative", "text": "Write a poem about rain."}]
    # The model drafts for itself, sampling at the target's temperature: rejection sampling
    # keeps most drafts (0.87 here; greedy drafts matched against sampled tokens keep 0.58).
    variant = {"name": "self-draft", "flags": {
        "spec-type": "draft-simple", "spec-draft-model": str(smollm2),
        "spec-draft-sampling": "probabilistic"}}
    matrix = matrix_dict(smollm2, prompts=prompts, variants=[variant], pairs=2,
                         sampling={"temperature": 0.7, "seed": 7},
                         **{"max-pairs": 2, "n-predict": 32})
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr

    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        runs = db.execute("select arm, block, prompt_id, repetition, seed, text, argv "
                          "from run").fetchall()
        [summary] = db.execute("select summary from job").fetchone()
    assert len(runs) == 2 * 2 * 2 * 2  # pairs x arms x prompts x repetitions
    seeds: dict[tuple[str, int], set[tuple[str, int]]] = defaultdict(set)
    texts: dict[str, set[str]] = defaultdict(set)
    for arm, _block, prompt, repetition, seed, text, argv in runs:
        seeds[prompt, repetition].add((arm, seed))
        texts[prompt].add(text)
        if arm == "variant":
            assert "--spec-draft-sampling" in argv
    # Every block of both arms sent one seed per prompt and repetition, its own.
    per_run = {key: {seed for _, seed in pairs} for key, pairs in seeds.items()}
    assert all(len(found) == 1 for found in per_run.values())
    assert all({arm for arm, _ in pairs} == {"baseline", "variant"} for pairs in seeds.values())
    assert len({seed for found in per_run.values() for seed in found}) == len(per_run) == 4
    assert all(len(found) > 1 for found in texts.values())  # repetitions draw afresh

    found = json.loads(summary)
    assert found["agreement_applicable"] is False and found["agreement_suspect"] is False
    [row] = report_rows()
    assert row["agreement"] is None and row["agreement_suspect"] is False
    assert row["pairs"] == 2 and row["ci_low"] <= row["speedup"] <= row["ci_high"]
    assert row["acceptance_rate"] > 0.8
