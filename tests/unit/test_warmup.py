"""The warm-up check (``farm.stats.warmup``): a block's first run against the same prompt's
later runs in the block, flagged when the first runs are slower. Fixed-seed simulations
measure its false alarms on a steady machine (normal, heavy-tailed and autocorrelated run
noise) and its power for a first run 5% and 10% slow (docs/statistics.md, "The warm-up").

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from farm.report.cells import block_notes
from farm.stats.warmup import NOT_MEASURED, warmup

JOBS = 300
PROMPTS = 3


def _job(rng: np.random.Generator, *, pairs: int = 4, repetitions: int = 3,
         first_slow: float = 0.0, noise: str = "normal", sd: float = 0.02) -> pd.DataFrame:
    """One job's runs in the executor's order: per block (both arms, counterbalanced) the
    prompts in order, each prompt's repetitions together. Block offsets (SD 3%), prompts of
    different speeds, a true speedup of 1.3, run noise of SD ``sd`` (``noise``: normal, t3,
    or AR(1) 0.5 within a block) and the block's first run ``first_slow`` slower."""
    blocks, per_block = 2 * pairs, PROMPTS * repetitions
    if noise == "t3":
        errors = rng.standard_t(3, (blocks, per_block)) * sd / math.sqrt(3.0)
    elif noise == "ar0.5":
        errors = np.empty((blocks, per_block))
        errors[:, 0] = rng.normal(0.0, sd, blocks)
        for i in range(1, per_block):
            errors[:, i] = 0.5 * errors[:, i - 1] + rng.normal(0.0, sd * math.sqrt(0.75), blocks)
    else:
        errors = rng.normal(0.0, sd, (blocks, per_block))
    block = np.repeat(np.arange(blocks), per_block)
    index = np.tile(np.arange(per_block), blocks)
    prompt, repetition = np.divmod(index, repetitions)
    variant = (block + block // 2) % 2 == 1
    log_speed = (np.log(40.0 + 20.0 * prompt) + rng.normal(0.0, 0.03, blocks)[block]
                 + 0.26 * variant + errors.ravel() + np.where(index == 0,
                                                               math.log1p(-first_slow), 0.0))
    runs = pd.DataFrame({"arm": np.where(variant, "variant", "baseline"), "block": block,
                         "pair": block // 2, "prompt_id": np.char.add("p", prompt.astype(str)),
                         "repetition": repetition, "decode_tok_s": np.exp(log_speed),
                         "started_at": pd.Timestamp("2026-12-02") + pd.to_timedelta(
                             1000 * block + index, unit="s")})
    # The store reads runs in prompt order, not in the order they ran.
    return runs.sort_values(["block", "prompt_id", "repetition"], ignore_index=True)


def test_a_first_run_fifth_slower_is_flagged_with_its_size() -> None:
    found = warmup(_job(np.random.default_rng(1), first_slow=0.2))
    assert found.flag and found.blocks == 8
    assert found.low < -0.2 < found.high < 0
    note = block_notes({"warmup_flag": True, "warmup_effect": found.effect,
                        "warmup_low": found.low, "warmup_high": found.high})
    assert note and note[0].startswith("warm-up short: first runs 20% slower")


def test_no_start_times_or_one_repetition_is_not_measured() -> None:
    job = _job(np.random.default_rng(2), first_slow=0.2)
    assert warmup(job.drop(columns="started_at")) == NOT_MEASURED
    once = warmup(_job(np.random.default_rng(3), repetitions=1, first_slow=0.2))
    assert once.blocks == 0 and not once.flag and math.isnan(once.effect)


def test_a_failed_first_run_leaves_its_block_out() -> None:
    job = _job(np.random.default_rng(4))
    first = job.groupby("block")["started_at"].transform("min") == job["started_at"]
    job.loc[first & (job["block"] == 0), "decode_tok_s"] = float("nan")
    assert warmup(job).blocks == 7


@pytest.mark.parametrize(("noise", "pairs"), [("normal", 4), ("t3", 4), ("ar0.5", 4),
                                              ("normal", 8)])
def test_a_steady_machine_is_flagged_at_most_at_the_tests_level(noise: str,
                                                                 pairs: int) -> None:
    """No warm-up effect: the flag (the whole 95% interval below 0, one side of it) fires
    in at most 4.5% of jobs (nominal 2.5%); 300 jobs a cell, a rate's SE about 0.009."""
    rng = np.random.default_rng(5100 + 10 * pairs + len(noise))
    flags = sum(warmup(_job(rng, pairs=pairs, noise=noise)).flag for _ in range(JOBS))
    rate = flags / JOBS
    print(f"\nsteady, {noise} run noise, {2 * pairs} blocks: false alarms {rate:.3f}")
    assert rate <= 0.045


@pytest.mark.parametrize(("slow", "pairs", "sd", "least"),
                         [(0.02, 4, 0.02, 0.5), (0.05, 4, 0.02, 0.95), (0.05, 4, 0.07, 0.2),
                          (0.10, 4, 0.07, 0.7), (0.05, 8, 0.07, 0.4)])
def test_a_slow_first_run_is_found(slow: float, pairs: int, sd: float, least: float) -> None:
    """A block's first run ``slow`` slower, 3 prompts x 3 repetitions, run noise ``sd``
    (0.07: this CPU node's run-to-run noise): the flag's power (at least ``least``), and
    the effect's mean within a point of the truth."""
    rng = np.random.default_rng(5200 + int(100 * slow) + pairs + int(100 * sd))
    found = [warmup(_job(rng, pairs=pairs, first_slow=slow, sd=sd)) for _ in range(JOBS)]
    power = sum(job.flag for job in found) / JOBS
    mean = float(np.mean([job.effect for job in found]))
    print(f"\nfirst run {slow:.0%} slow, {2 * pairs} blocks, run SD {sd}: power {power:.3f}, "
          f"mean effect {mean:+.3f}")
    assert mean == pytest.approx(-slow, abs=0.01)
    assert power >= least
