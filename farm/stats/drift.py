"""The machine's trend over a job's blocks: a slope with its interval, and a test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.stats.frame import NAN, valid_runs


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


# The correlations of consecutive blocks the fit chooses among (AR(1), by restricted
# maximum likelihood): a server session's state carries over, so none is negative.
CORRELATIONS = np.linspace(0.0, 0.95, 39)
# The slope's two-sided 5% critical value for |t|, by the number of blocks (interpolated in
# 1 / blocks; the last beyond it, where it is conservative): the largest 95% quantile of |t|
# over steady machines whose blocks are AR(1) up to 0.8, with independent run noise of up
# to half the blocks' variance. Computed once, seeded:
# .venv/bin/python -m tests.bench.bench_drift --table (docs/statistics.md).
CRITICAL = ((6, 4.89), (8, 4.33), (10, 4.22), (12, 4.12), (16, 3.87), (20, 3.73), (24, 3.61),
            (32, 3.45), (48, 3.30), (64, 3.22), (96, 3.10))
# A residual spread below this (log units) is rounding, not noise: a constant machine.
STEADY = 1e-9


def trend_t(design: npt.NDArray[np.float64], values: npt.NDArray[np.float64]
            ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The slope (the design's last column) of each row of ``values`` and its standard
    error, fitted by generalised least squares for AR(1) noise whose correlation is the one
    of ``CORRELATIONS`` with the largest restricted likelihood; the noise's variance on
    blocks - columns - 1 df (the correlation is estimated too)."""
    n, columns = design.shape
    rho = CORRELATIONS[:, None, None]
    # Prais-Winsten: each block less rho times the one before, the first scaled.
    white = np.concatenate([np.sqrt(1.0 - rho * rho) * design[None, :1],
                            design[None, 1:] - rho * design[None, :-1]], axis=1)
    inverse = np.linalg.inv(white.transpose(0, 2, 1) @ white)
    rows = values[None, :, :]
    white_values = np.concatenate([np.sqrt(1.0 - rho * rho) * rows[:, :, :1],
                                   rows[:, :, 1:] - rho * rows[:, :, :-1]], axis=2)
    coefficients = white_values @ white @ inverse  # correlation x row x column
    residual = white_values - coefficients @ white.transpose(0, 2, 1)
    squares = np.einsum("krn,krn->kr", residual, residual)
    # The restricted log likelihood, less constants, at each correlation (rows: k).
    likelihood = -0.5 * ((n - columns) * np.log(squares)
                         - np.log(1.0 - CORRELATIONS[:, None] ** 2)
                         - np.linalg.slogdet(inverse)[1][:, None])
    best = likelihood.argmax(axis=0)
    row = np.arange(values.shape[0])
    slope = coefficients[best, row, -1]
    variance = squares[best, row] / (n - columns - 1) * inverse[best, -1, -1]
    return slope, np.sqrt(variance)


def critical_t(blocks: int) -> float:
    """The slope's 5% critical |t| with this many blocks (``CRITICAL``)."""
    known = np.array(CRITICAL, dtype=float)
    return float(np.interp(-1.0 / blocks, -1.0 / known[:, 0], known[:, 1]))


def drift(runs: pd.DataFrame) -> Drift:
    """A trend over every block of the job, both arms, tested against zero, allowing for
    blocks whose noise is strongly correlated from one to the next.

    Each block gives one value, the mean over the job's prompts of the log median decode
    tok/s; the fit has an arm term and a term for a pair's first block (so a speedup or a
    carry-over is not read as drift) and a slope on the block index. Consecutive blocks
    share the machine's state, so their noise is autocorrelated: the slope is fitted by
    generalised least squares for AR(1) noise (``trend_t``), and its t is compared with a
    critical value that holds false positives at 5% for block correlations up to 0.8
    (``CRITICAL``): with 16 blocks a correlation that strong cannot be told from a weaker
    one, so the test allows for it on every job. The interval is the slope -/+ that critical
    value times its standard error. Counterbalancing and the crossover model keep a linear
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
    found, _, rank, _ = np.linalg.lstsq(design, value, rcond=None)
    residual = value - design @ found
    # Residuals of rounding size (a machine that did not move at all): nothing to test.
    if rank < design.shape[1] or not math.sqrt(float(residual @ residual)
                                               / len(value)) > STEADY:
        return Drift(0.0, NAN, NAN, 0.0, False)
    slopes, errors = trend_t(design, value[None, :])
    slope = float(slopes[0])
    margin = critical_t(len(value)) * float(errors[0])
    change = math.expm1(slope * float(block.max() - block.min()))
    return Drift(slope, slope - margin, slope + margin, change,
                 bool(slope - margin > 0 or slope + margin < 0))
