"""Whether a block's warm-up was enough: the first run of each block against the same
prompt's later runs in that block.

Each block starts a server and sends a short warm-up request (``WARMUP_TOKENS``) before its
runs. If that is not enough (caches, clocks, lazily loaded weights), a block's first run is
slower than the rest. The runs of a block follow one order (prompts in the matrix's order,
each prompt's repetitions together), so the first run is always the first prompt's first
repetition: comparing it with the later repetitions of the same prompt in the same block
keeps the prompt's own speed and the block's offset out of the contrast. Blocks are the
units: one contrast each, a t on blocks - 1 df.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import NAN
from farm.stats.intervals import t_margin

# Fewer contrasts than this give an effect but no interval and no flag.
MIN_BLOCKS = 3


@dataclass(frozen=True)
class Warmup:
    """How much faster (negative: slower) a block's first run decodes than the same
    prompt's later runs in its block (``effect``: a ratio less 1, geometric mean over
    blocks) with its 95% interval, over ``blocks`` blocks; ``flag`` when the whole interval
    is below 0: the warm-up was not enough. NaN and no flag where no block repeats its
    first prompt (one repetition) or the runs carry no start times."""

    effect: float
    low: float
    high: float
    blocks: int
    flag: bool


NOT_MEASURED = Warmup(NAN, NAN, NAN, 0, False)


def first_run_contrasts(runs: pd.DataFrame) -> list[float]:
    """Per block whose first run (by ``started_at``) has a usable decode speed and later
    runs of its prompt: log tok/s of the first run less the mean log tok/s of those."""
    if "started_at" not in runs.columns or runs["started_at"].isna().all():
        return []
    contrasts = []
    for _, block in runs.dropna(subset=["started_at"]).groupby("block", sort=True):
        ordered = block.sort_values("started_at", kind="stable")
        speed = ordered["decode_tok_s"].to_numpy(dtype=float)
        usable = np.isfinite(speed) & (speed > 0)
        if not usable[0]:
            continue
        later = (ordered["prompt_id"] == ordered["prompt_id"].iloc[0]).to_numpy() & usable
        later[0] = False
        if later.any():
            logs = np.log(np.where(usable, speed, 1.0))
            contrasts.append(float(logs[0] - logs[later].mean()))
    return contrasts


def warmup(runs: pd.DataFrame, level: float = 0.95) -> Warmup:
    """The job's ``Warmup`` from its runs (both arms' blocks)."""
    contrasts = np.array(first_run_contrasts(runs))
    blocks = int(contrasts.size)
    if blocks == 0:
        return NOT_MEASURED
    mean = float(contrasts.mean())
    if blocks < MIN_BLOCKS:
        return Warmup(math.expm1(mean), NAN, NAN, blocks, False)
    margin = t_margin(float(contrasts.std(ddof=1)) / math.sqrt(blocks), blocks - 1, level)
    return Warmup(math.expm1(mean), math.expm1(mean - margin), math.expm1(mean + margin),
                  blocks, mean + margin < 0.0)
