"""The machine's trend over a job's blocks: a slope with its interval, and a test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import NAN, valid_runs
from farm.stats.intervals import t_margin


@dataclass(frozen=True)
class Drift:
    """The machine's trend over the job's blocks, with its interval and a test.

    ``slope_per_block`` is in log units per block (about the relative change per block),
    ``low``/``high`` its 95% interval, ``change`` the fitted relative change from the first
    block to the last; ``flag`` says the slope differs from zero at the 5% level.
    """

    slope_per_block: float
    low: float
    high: float
    change: float
    flag: bool


def drift(runs: pd.DataFrame, level: float = 0.95) -> Drift:
    """A least-squares trend over every block of the job, both arms, tested against zero.

    Each block gives one value, the mean over the job's prompts of the log median decode
    tok/s; the fit has an arm term and a term for a pair's first block (so a speedup or a
    carry-over is not read as drift) and a slope on the block index, whose t interval has
    blocks - 4 df. Counterbalancing and the crossover model keep a linear drift out of the
    speedup; the flag says the machine was not steady, with an error rate of 1 - level.
    """
    valid = valid_runs(runs)
    medians = valid.groupby(["block", "prompt_id"])["decode_tok_s"].median().unstack()
    medians = medians.dropna(axis="columns")
    if medians.shape[1] == 0 or len(medians) < 5:
        return Drift(0.0, NAN, NAN, 0.0, False)
    block = medians.index.to_numpy(dtype=float)
    value = np.log(medians.to_numpy(dtype=float)).mean(axis=1)
    facts = runs.drop_duplicates("block").set_index("block").reindex(medians.index)
    design = np.column_stack([np.ones_like(block),
                              (facts["arm"] == "variant").to_numpy(dtype=float),
                              (facts["position"] == 0).to_numpy(dtype=float), block])
    coefficients, _, rank, _ = np.linalg.lstsq(design, value, rcond=None)
    df = len(value) - int(rank)
    if rank < design.shape[1] or df < 1:
        return Drift(0.0, NAN, NAN, 0.0, False)
    residual = value - design @ coefficients
    covariance = float(residual @ residual) / df * np.linalg.inv(design.T @ design)
    slope = float(coefficients[3])
    margin = t_margin(math.sqrt(float(covariance[3, 3])), df, level)
    change = math.expm1(slope * float(block.max() - block.min()))
    return Drift(slope, slope - margin, slope + margin, change,
                 bool(slope - margin > 0 or slope + margin < 0))
