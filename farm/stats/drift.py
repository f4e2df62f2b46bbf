"""The machine's trend over a job's blocks: a slope with its interval, and a test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import NAN, Floats, valid_runs


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


# The correlations of consecutive blocks the fit chooses among (AR(1), by maximum
# likelihood): a server session's state carries over, so none is negative.
CORRELATIONS = np.linspace(0.0, 0.95, 39)
# The likelihood ratio's two-sided 5% critical value for its root, by the number of
# blocks (interpolated in 1 / blocks; the last beyond it, where it is conservative): the
# largest 95% quantile over steady machines whose blocks are AR(1) 0.5-0.8 (below 0.5 the
# quantile is lower), with independent run noise of up to half the blocks' variance.
# Computed once, seeded: .venv/bin/python -m tests.bench.bench_drift --table
# (docs/statistics.md).
CRITICAL = ((6, 4.17), (8, 3.52), (10, 3.28), (12, 3.16), (16, 3.00), (20, 2.95), (24, 2.94),
            (32, 2.95), (48, 2.93), (64, 2.93), (96, 2.92))
# A residual spread below this (log units) is rounding, not noise: a constant machine.
STEADY = 1e-9
# Candidate slopes a search for an interval's end tries at once, and how many times it
# narrows the first pass's bracket; it looks at most ``REACH`` standard errors out.
CANDIDATES, ROUNDS, REACH = 24, 3, 64.0


def fit_ar1(design: Floats, values: Floats, correlations: Floats = CORRELATIONS
            ) -> tuple[Floats, Floats, Floats]:
    """For each row of ``values``: the largest log likelihood (AR(1) noise, the noise's
    variance profiled out) over ``correlations``, the coefficients at that correlation
    (generalised least squares, Prais-Winsten) and the last coefficient's standard error."""
    n = design.shape[0]
    rho = correlations[:, None, None]
    first = np.sqrt(1.0 - rho * rho)
    # Prais-Winsten: each block less rho times the one before, the first scaled.
    white = np.concatenate([first * design[None, :1],
                            design[None, 1:] - rho * design[None, :-1]], axis=1)
    inverse = np.linalg.inv(white.transpose(0, 2, 1) @ white)
    rows = values[None, :, :]
    white_values = np.concatenate([first * rows[:, :, :1],
                                   rows[:, :, 1:] - rho * rows[:, :, :-1]], axis=2)
    coefficients = white_values @ white @ inverse  # correlation x row x column
    residual = white_values - coefficients @ white.transpose(0, 2, 1)
    squares = np.maximum(np.einsum("krn,krn->kr", residual, residual), 1e-300)
    likelihood = -0.5 * (n * np.log(squares) - np.log(1.0 - correlations[:, None] ** 2))
    best = likelihood.argmax(axis=0)
    row = np.arange(values.shape[0])
    error = np.sqrt(squares[best, row] / max(n - design.shape[1], 1)
                    * inverse[best, -1, -1])
    return likelihood[best, row], coefficients[best, row], error


def likelihood_ratio(design: Floats, values: Floats, slope: Floats | float = 0.0) -> Floats:
    """For each row of ``values``, the square root of the likelihood ratio statistic of the
    slope (the design's last column) equal to ``slope`` against a free slope, both with
    AR(1) noise whose correlation and variance are fitted by maximum likelihood."""
    full, _, _ = fit_ar1(design, values)
    return _root(design, values, full, slope)


def _root(design: Floats, values: Floats, full: Floats, slope: Floats | float) -> Floats:
    """``likelihood_ratio`` given the free slope's log likelihoods ``full``."""
    slopes = np.broadcast_to(np.asarray(slope, dtype=float), (values.shape[0],))
    held, _, _ = fit_ar1(design[:, :-1], values - slopes[:, None] * design[None, :, -1])
    root: Floats = np.sqrt(np.maximum(2.0 * (full - held), 0.0))
    return root


def critical_root(blocks: int) -> float:
    """The likelihood ratio's 5% critical root with this many blocks (``CRITICAL``)."""
    known = np.array(CRITICAL, dtype=float)
    return float(np.interp(-1.0 / blocks, -1.0 / known[:, 0], known[:, 1]))


def _interval_end(design: Floats, value: Floats, full: float, slope: float, step: float,
                  critical: float) -> float:
    """The farthest slope from the fitted ``slope`` (whose log likelihood is ``full``), in
    the direction of ``step`` (a standard error, signed), that the likelihood ratio test
    does not reject before the first it does: candidates out to ``REACH`` steps
    (geometric), then the bracket narrowed ``ROUNDS`` times. Zero is tried wherever it lies
    in the bracket, so a rejected zero is never inside; where nothing within ``REACH`` steps
    is rejected, the end is ``REACH`` steps out."""
    zero = -slope / step  # zero's distance in steps: on this side when positive
    near, far = 0.0, math.inf  # the last candidate not rejected, the first rejected
    reach = np.geomspace(1.0 / 16.0, REACH, CANDIDATES)
    for _ in range(ROUNDS + 1):
        if near < zero < far:
            reach = np.sort(np.append(reach, zero))
        slopes = np.where(reach == zero, 0.0, slope + step * reach)
        rejected = _root(design, np.repeat(value[None, :], reach.size, axis=0),
                         np.full(reach.size, full), slopes) > critical
        first = int(rejected.argmax()) if rejected.any() else reach.size
        if first < reach.size:
            far = float(reach[first])
        if first > 0:
            near = float(reach[first - 1])
        if far == math.inf:
            break
        reach = np.linspace(near, far, CANDIDATES + 2)[1:-1]
    return slope + step * near


def block_values(runs: pd.DataFrame) -> pd.Series:
    """Each block's value, indexed by block: the mean over the job's prompts (those measured
    in every block) of the log median decode tok/s; empty without such a prompt."""
    valid = valid_runs(runs)
    medians = valid.groupby(["block", "prompt_id"])["decode_tok_s"].median().unstack()
    medians = medians.dropna(axis="columns")
    if medians.shape[1] == 0:
        return pd.Series(dtype=float)
    values: pd.Series = np.log(medians).mean(axis=1)
    return values


def drift(runs: pd.DataFrame) -> Drift:
    """A trend over every block of the job, both arms, tested against zero, allowing for
    blocks whose noise is strongly correlated from one to the next.

    Each block gives one value, the mean over the job's prompts of the log median decode
    tok/s; the fit has an arm term and a term for a pair's first block (so a speedup or a
    carry-over is not read as drift) and a slope on the block index. Consecutive blocks
    share the machine's state, so their noise is autocorrelated: the slope is tested by the
    likelihood ratio of AR(1) models with and without it (each with its own correlation,
    ``likelihood_ratio``), whose root is compared with a critical value that holds false
    positives at 5% for block correlations up to 0.8 (``CRITICAL``). The interval is the
    slopes that test does not reject (the profile likelihood's; where those are not one
    stretch, the stretch around the fitted slope, widened to zero when zero is not
    rejected), so the flag is set exactly when it leaves out zero. Counterbalancing and the
    crossover model keep a linear drift out of the speedup; the flag says the machine was
    not steady.
    """
    values = block_values(runs)
    if len(values) < 6:
        return Drift(0.0, NAN, NAN, 0.0, False)
    block = values.index.to_numpy(dtype=float)
    value = values.to_numpy(dtype=float)
    facts = runs.drop_duplicates("block").set_index("block").reindex(values.index)
    design = np.column_stack([np.ones_like(block),
                              (facts["arm"] == "variant").to_numpy(dtype=float),
                              (facts["position"] == 0).to_numpy(dtype=float), block])
    found, _, rank, _ = np.linalg.lstsq(design, value, rcond=None)
    residual = value - design @ found
    # Residuals of rounding size (a machine that did not move at all): nothing to test.
    if rank < design.shape[1] or not math.sqrt(float(residual @ residual)
                                               / len(value)) > STEADY:
        return Drift(0.0, NAN, NAN, 0.0, False)
    full, coefficients, errors = fit_ar1(design, value[None, :])
    slope, error = float(coefficients[0, -1]), float(errors[0])
    critical = critical_root(len(value))
    flag = bool(_root(design, value[None, :], full, 0.0)[0] > critical)
    low = _interval_end(design, value, float(full[0]), slope, -error, critical)
    high = _interval_end(design, value, float(full[0]), slope, error, critical)
    if not flag:  # zero is not rejected: the interval holds it
        low, high = min(low, 0.0), max(high, 0.0)
    change = math.expm1(slope * float(block.max() - block.min()))
    return Drift(slope, low, high, change, flag)
