"""Fixed-seed simulations of the drift flag on the second audit's generator (issue 38,
/work/shared/statsaudit2/sim2_drift.py and common.py): a steady machine whose block
offsets are AR(1), optionally plus a linear trend, measured through ``drift(runs)`` on a
runs frame. tests/unit/test_stats_drift_ar.py runs it with few replicates,
tests/bench/bench_drift.py with many. Each cell returns its figure; none asserts anything.

A job: counterbalanced AB/BA block pairs, 4 prompts x 3 repetitions a block, a true
speedup of 1.3; each job draws its block SD from U(1%, 5%) and its run SD from U(1%, 6%).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from farm.stats.drift import drift
from farm.stats.frame import Floats

PROMPTS, REPS = 4, 3
SPEEDUP = 1.3
# The ranges a job draws its block SD and its run SD from (log units, uniform).
BLOCK_SD, RUN_SD = (0.01, 0.05), (0.01, 0.06)
# The trend a power cell adds: 1% a block (log units, a slowing machine).
PER_BLOCK = math.log(0.99)


def ar1_rows(rng: np.random.Generator, rows: int, blocks: int, phi: float) -> Floats:
    """``rows`` stationary AR(1) series of ``blocks`` values, correlation ``phi``, unit
    variance (one draw of all the innovations, then the recursion)."""
    noise = rng.normal(size=(rows, blocks))
    series = np.empty_like(noise)
    series[:, 0] = noise[:, 0]
    for i in range(1, blocks):
        series[:, i] = phi * series[:, i - 1] + math.sqrt(1 - phi * phi) * noise[:, i]
    return series


def runs_frame(rng: np.random.Generator, pairs: int, offsets: Floats,
               run_sd: float) -> pd.DataFrame:
    """A job's runs: log tok/s = the prompt's base + the variant's speedup + the block's
    offset + run noise of SD ``run_sd``; the first pair opens with either arm."""
    opens = int(rng.random() < 0.5)
    n_block = PROMPTS * REPS
    pair = np.repeat(np.arange(pairs), 2 * n_block)
    position = np.tile(np.repeat(np.arange(2), n_block), pairs)
    prompt = np.tile(np.repeat(np.arange(PROMPTS), REPS), 2 * pairs)
    block = 2 * pair + position
    variant = (pair + position + opens) % 2 == 1
    base = np.log(np.linspace(30.0, 120.0, PROMPTS))[prompt]
    log_speed = (base + variant * math.log(SPEEDUP) + offsets[block]
                 + rng.normal(0, run_sd, block.size))
    return pd.DataFrame({"arm": np.where(variant, "variant", "baseline"), "block": block,
                         "pair": pair, "position": position,
                         "prompt_id": np.char.add("p", prompt.astype(str)),
                         "repetition": np.tile(np.arange(REPS), 2 * PROMPTS * pairs),
                         "decode_tok_s": np.exp(log_speed)})


def job(rng: np.random.Generator, phi: float, blocks: int, per_block: float = 0.0
        ) -> pd.DataFrame:
    """One job's runs frame: AR(1) ``phi`` block offsets over ``blocks`` blocks plus a
    trend of ``per_block`` log units a block."""
    sd = rng.uniform(*BLOCK_SD)
    offsets = sd * ar1_rows(rng, 1, blocks, phi)[0] + per_block * np.arange(blocks)
    return runs_frame(rng, blocks // 2, offsets, rng.uniform(*RUN_SD))


def flag_rate(phi: float, blocks: int, jobs: int, seed: int, per_block: float = 0.0
              ) -> float:
    """The share of ``jobs`` jobs ``drift`` flags: false positives when ``per_block`` is 0,
    else the power for that trend."""
    rng = np.random.default_rng(seed)
    return sum(drift(job(rng, phi, blocks, per_block)).flag for _ in range(jobs)) / jobs
