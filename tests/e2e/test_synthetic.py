"""Synthetic acceptance (``--spec-synth-rates``): known truth the farm must read back.

The anti-oracle's own drafts are never right, so every accepted draft token is the forced
pattern's: per position, accepted / drafts is a binomial draw around the rate that was set.
llama-server seeds the pattern with the request's seed, so each run needs its own (the farm
mixes the matrix's seed with the prompt and repetition), else every run repeats one draw.
A run's last drafts are cut short by its token budget and cannot accept their later
positions, while the server counts them as drafts: the drafted tokens say how many
positions are missing, which bounds the read-back from both sides.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from tests.e2e.test_farm_run import farm
from tests.helpers import write_matrix
from workers.setup.provision import Provisioned

pytestmark = pytest.mark.server
RATES = (0.9, 0.6, 0.3)
Z_99 = 2.5758  # two-sided 99% normal quantile


def test_per_position_acceptance_reads_back_the_rates_that_were_set(
        tmp_path: Path, provisioned: Provisioned, isolated_data_dir: Path) -> None:
    # ~2.8 tokens per verify step: 4 prompts x 7 repetitions x 230 tokens ~ 2,300 drafts.
    matrix = {
        "campaign": "synthetic", "prompt-mode": "completion",
        "models": [{"name": "anti", "path": str(provisioned.models["qwen35-mtp-anti"])}],
        "prompts": ["one two three", "the farm reads", "speculative decoding", "hello"],
        "n-predict": 230, "repetitions": 7, "pairs": 1, "max-pairs": 1,
        "flags": {"ctx-size": 256, "threads": 1},
        "variants": [{"name": "synth", "flags": {
            "spec-type": "draft-mtp", "spec-draft-n-max": 3,
            "spec-synth-rates": ",".join(map(str, RATES))}}],
    }
    result = farm("run", str(write_matrix(tmp_path, matrix)))
    assert result.returncode == 0, result.stderr
    with sqlite3.connect(isolated_data_dir / "farm.db") as db:
        rows = db.execute("select spec_drafts, spec_drafted, spec_accepted_per_pos from run "
                          "where arm = 'variant'").fetchall()
    drafts = sum(count for count, _, _ in rows)
    missing = len(RATES) * drafts - sum(drafted for _, drafted, _ in rows)
    accepted = [sum(json.loads(per_pos)[position] for _, _, per_pos in rows)
                for position in range(len(RATES))]
    assert drafts >= 2000 and 0 <= missing < drafts / 20
    for rate, count in zip(RATES, accepted, strict=True):
        # At most `missing` drafts lack this position: the rate read over all drafts is a
        # lower bound, over the rest an upper one; the 99% binomial range must meet both.
        low, high = count / drafts, count / (drafts - missing)
        margin = Z_99 * math.sqrt(rate * (1 - rate) / (drafts - missing))
        print(f"rate {rate}: read back {low:.4f}-{high:.4f} over {drafts} drafts, {missing} "
              f"positions cut (99% range {rate - margin:.4f}-{rate + margin:.4f})")
        assert low <= rate + margin and high >= rate - margin
