"""The machine's trend over a job's blocks: a slope with its interval, and a test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
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


# The drift test's AR(1) correlation of consecutive blocks: at least this (a server
# session's state carries over: clocks, caches, the machine's load), else the residuals'
# lag-1 correlation bias-corrected, at most ``MOST_CORRELATION``. Measured: false positives
# 0.005 with independent blocks, 0.043 at 0.5 (docs/statistics.md).
LEAST_CORRELATION = 0.4
MOST_CORRELATION = 0.95
# A residual spread below this (log units) is rounding, not noise: a constant machine.
STEADY = 1e-9


def _least_squares(design: npt.NDArray[np.float64], value: npt.NDArray[np.float64]
                   ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], int, int]:
    found, _, rank, _ = np.linalg.lstsq(design, value, rcond=None)
    coefficients: npt.NDArray[np.float64] = np.asarray(found, dtype=np.float64)
    return coefficients, value - design @ coefficients, int(rank), len(value) - int(rank)


def block_correlation(residual: npt.NDArray[np.float64]) -> float:
    """The AR(1) correlation the drift test allows for: the lag-1 correlation of the
    least-squares residuals plus its small-sample bias, twice (1 + 3 r) / n, clipped to
    [``LEAST_CORRELATION``, ``MOST_CORRELATION``]."""
    total = float(residual @ residual)
    r = float(residual[1:] @ residual[:-1]) / total if total > 0 else 0.0
    return min(max(r + 2.0 * (1.0 + 3.0 * r) / residual.size, LEAST_CORRELATION),
               MOST_CORRELATION)


def drift(runs: pd.DataFrame, level: float = 0.95) -> Drift:
    """A trend over every block of the job, both arms, tested against zero, allowing for
    blocks whose noise is correlated from one to the next.

    Each block gives one value, the mean over the job's prompts of the log median decode
    tok/s; the fit has an arm term and a term for a pair's first block (so a speedup or a
    carry-over is not read as drift) and a slope on the block index. Consecutive blocks
    share the machine's state, so their noise is autocorrelated, and a least-squares t
    test read that as drift (false positives 0.197 at AR(1) 0.5): the slope is fitted by
    generalised least squares (Prais-Winsten) for AR(1) noise of ``block_correlation``,
    its t interval on blocks - 5 df. Counterbalancing and the crossover model keep a linear
    drift out of the speedup; the flag says the machine was not steady.
    """
    valid = valid_runs(runs)
    medians = valid.groupby(["block", "prompt_id"])["decode_tok_s"].median().unstack()
    medians = medians.dropna(axis="columns")
    if medians.shape[1] == 0 or len(medians) < 6:
        return Drift(0.0, NAN, NAN, 0.0, False)
    block = medians.index.to_numpy(dtype=float)
    value = np.log(medians.to_numpy(dtype=float)).mean(axis=1)
    facts = runs.drop_duplicates("block").set_index("block").reindex(medians.index)
    design = np.column_stack([np.ones_like(block),
                              (facts["arm"] == "variant").to_numpy(dtype=float),
                              (facts["position"] == 0).to_numpy(dtype=float), block])
    _, residual, rank, df = _least_squares(design, value)
    # Residuals of rounding size (a machine that did not move at all): nothing to test.
    if rank < design.shape[1] or df < 2 or not math.sqrt(float(residual @ residual)
                                                         / len(value)) > STEADY:
        return Drift(0.0, NAN, NAN, 0.0, False)
    rho = block_correlation(residual)
    # Prais-Winsten: each block less rho times the one before, the first scaled.
    whiten = np.eye(len(value)) - rho * np.eye(len(value), k=-1)
    whiten[0, 0] = math.sqrt(1.0 - rho * rho)
    coefficients, residual, _, _ = _least_squares(whiten @ design, whiten @ value)
    df -= 1  # rho is estimated too
    white = whiten @ design
    covariance = float(residual @ residual) / df * np.linalg.inv(white.T @ white)
    slope = float(coefficients[3])
    margin = t_margin(math.sqrt(float(covariance[3, 3])), df, level)
    change = math.expm1(slope * float(block.max() - block.min()))
    return Drift(slope, slope - margin, slope + margin, change,
                 bool(slope - margin > 0 or slope + margin < 0))
