"""The machine's trend over a job's blocks: a slope with its interval, and a test, made
against the machine's earlier jobs like it where it has enough of them, else from the job's
own blocks."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from itertools import islice
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.stats.distributions import f_cdf
from farm.stats.frame import NAN, Floats, usable
from farm.stats.intervals import t_margin


@dataclass(frozen=True)
class Drift:
    """The machine's trend over the job's blocks, with its interval and a test.

    ``slope_per_block`` is in log units per block (about the relative change per block),
    ``low``/``high`` its 95% interval, ``change`` the fitted relative change from the first
    block to the last; ``flag`` says the slope differs from zero at the 5% level.
    ``earlier_jobs``: the machine's earlier jobs the test was made against (0: the job's
    own blocks alone).
    """

    slope_per_block: float
    low: float
    high: float
    change: float
    flag: bool
    earlier_jobs: int = 0


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
# A job is tested against the machine's earlier jobs like it (same prompts and repetitions
# a block; farm.results.runs.earlier_runs finds them) from EARLIER_MIN of them, the latest
# EARLIER_MAX (issue 38: docs/statistics.md, "The drift flag").
EARLIER_MIN, EARLIER_MAX = 20, 32
# Their block noise is AR(1) with one of these correlations plus white noise (run noise
# averaged in a block) of one of these variances over the AR(1)'s, the pair chosen by
# restricted maximum likelihood.
MACHINE_CORRELATIONS = np.linspace(0.0, 0.95, 20)
WHITE_RATIOS = np.concatenate([[0.0], np.geomspace(0.02, 50.0, 12)])
# The level of the t interval against the earlier jobs: 95.5%, not 95%, because the
# covariance the earlier jobs choose is uncertain too, which Student's t does not count (at
# 95% with 16 earlier jobs, 0.044-0.061 false positives in the bench's cells).
LEVEL = 0.955
# A job whose residual variance is beyond this quantile of its F distribution against the
# earlier jobs' is not like them (the machine was noisier): it is tested alone.
MISFIT = 0.99
# The grid's covariance matrices made at once: at most this many numbers.
CHUNK = 2_000_000


def fit_ar1(design: Floats, values: Floats, correlations: Floats = CORRELATIONS
            ) -> tuple[Floats, Floats, Floats]:
    """For each row of ``values``: the largest log likelihood (AR(1) noise, the noise's
    variance profiled out) over ``correlations``, the coefficients at that correlation
    (generalised least squares, Prais-Winsten) and the last coefficient's standard error."""
    n = design.shape[0]
    rho = correlations[:, None, None]
    first = np.sqrt(1.0 - rho * rho)
    white, inverse = _whitened(np.asarray(design, dtype=float).tobytes(), design.shape,
                               np.asarray(correlations, dtype=float).tobytes())
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


@lru_cache(maxsize=64)
def _whitened(design_bytes: bytes, shape: tuple[int, ...], correlations_bytes: bytes
              ) -> tuple[Floats, Floats]:
    """``fit_ar1``'s design (given as its bytes and shape) at each correlation (given as
    its bytes) after Prais-Winsten, and the inverse of its cross product: the same for
    every job whose blocks ran alike, so made once (read-only)."""
    design = np.frombuffer(design_bytes).reshape(shape)
    rho = np.frombuffer(correlations_bytes)[:, None, None]
    first = np.sqrt(1.0 - rho * rho)
    # Prais-Winsten: each block less rho times the one before, the first scaled.
    white = np.concatenate([first * design[None, :1],
                            design[None, 1:] - rho * design[None, :-1]], axis=1)
    inverse = np.linalg.inv(white.transpose(0, 2, 1) @ white)
    white.setflags(write=False)
    inverse.setflags(write=False)
    return white, inverse


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
    block, value = _block_values(runs)
    if not value.size:
        return pd.Series(dtype=float)
    return pd.Series(value, index=pd.Index(block, name="block"))


def _block_values(runs: pd.DataFrame) -> tuple[npt.NDArray[Any], Floats]:
    """``block_values``' blocks (sorted) and values, as arrays: none without a prompt
    measured in every block."""
    valid = usable(runs)
    block, at_block = np.unique(runs["block"].to_numpy()[valid], return_inverse=True)
    prompt, at_prompt = np.unique(runs["prompt_id"].to_numpy(dtype=str)[valid],
                                  return_inverse=True)
    # Each block x prompt cell's runs, sorted, and the middle one or two of them.
    cell = at_block * prompt.size + at_prompt
    speed = runs["decode_tok_s"].to_numpy(dtype=float)[valid]
    ordered = speed[np.lexsort((speed, cell))]
    counts = np.bincount(cell, minlength=block.size * prompt.size)
    starts = np.cumsum(counts) - counts
    last = max(ordered.size - 1, 0)
    middle = (ordered[np.minimum(starts + (counts - 1) // 2, last)]
              + ordered[np.minimum(starts + counts // 2, last)]) / 2.0 if ordered.size else 0.0
    medians = np.where(counts > 0, middle, np.nan).reshape(block.size, prompt.size)
    every = ~np.isnan(medians).any(axis=0)
    if not every.any():
        return block[:0], np.empty(0)
    value: Floats = np.log(medians[:, every]).mean(axis=1)
    return block, value


@dataclass(frozen=True)
class Blocks:
    """A job's block values (``block_values``) and the drift fit's design for them: an
    intercept, an arm term, a term for a pair's first block and the block index."""

    design: Floats
    values: Floats

    @property
    def span(self) -> float:
        """Blocks from the first to the last (the block index's range)."""
        return float(np.ptp(self.design[:, -1]))


def job_blocks(runs: pd.DataFrame) -> Blocks | None:
    """The job's ``Blocks``; None when there is no trend to test: fewer than 6 blocks, a
    design without every term (every block in one arm or place), or residuals of rounding
    size (a machine that did not move at all)."""
    index, value = _block_values(runs)
    if len(value) < 6:
        return None
    block = index.astype(float)
    # Each block's arm and place, from its first run.
    blocks, first = np.unique(runs["block"].to_numpy(), return_index=True)
    at = first[np.searchsorted(blocks, index)]
    design = np.column_stack([np.ones_like(block),
                              runs["arm"].to_numpy()[at] == "variant",
                              runs["position"].to_numpy()[at] == 0, block]).astype(float)
    found, _, rank, _ = np.linalg.lstsq(design, value, rcond=None)
    residual = value - design @ found
    if rank < design.shape[1] or not math.sqrt(float(residual @ residual)
                                               / len(value)) > STEADY:
        return None
    return Blocks(design, value)


def block_layout(runs: pd.DataFrame) -> frozenset[tuple[str, int]]:
    """The prompts and repetitions a job ran in a block: jobs alike in it average the same
    run noise into a block's value."""
    return frozenset(zip(runs["prompt_id"].astype(str).tolist(),
                         runs["repetition"].astype(int).tolist(), strict=True))


@dataclass(frozen=True)
class _Restricted:
    """Restricted-likelihood pieces of jobs' blocks at each grid covariance (grid point x
    job): the residual sum of squares and log determinants, the generalised least squares
    slope and its variance at unit scale."""

    squares: Floats
    determinants: Floats
    slope: Floats
    variance: Floats
    df: Floats


def _grid() -> tuple[Floats, Floats]:
    """Every pair of a block correlation (``MACHINE_CORRELATIONS``) and a white noise ratio
    (``WHITE_RATIOS``)."""
    rho, white = np.meshgrid(MACHINE_CORRELATIONS, WHITE_RATIOS, indexing="ij")
    return rho.ravel(), white.ravel()


@lru_cache(maxsize=8)
def _grid_inverses(n: int) -> tuple[tuple[slice, Floats, Floats], ...]:
    """For ``n`` blocks, the grid's covariance matrices (``_grid``) inverted, with their
    log determinants, in chunks of at most ``CHUNK`` numbers: the same for every job of
    ``n`` blocks, so made once (read-only)."""
    rho, white = _grid()
    lag = np.abs(np.subtract.outer(np.arange(n), np.arange(n)))
    step = max(1, CHUNK // (n * n))
    chunks: list[tuple[slice, Floats, Floats]] = []
    for start in range(0, rho.size, step):
        grid = slice(start, start + step)
        # Each of unit variance, so that a slope's variance at unit scale means the same
        # at every grid point: the scale is the blocks' variance.
        covariance = ((rho[grid, None, None] ** lag[None]
                       + white[grid, None, None] * np.eye(n)[None])
                      / (1.0 + white[grid, None, None]))
        inverse = np.asarray(np.linalg.inv(covariance), dtype=float)
        log_determinant = np.asarray(np.linalg.slogdet(covariance)[1], dtype=float)
        inverse.setflags(write=False)
        log_determinant.setflags(write=False)
        chunks.append((grid, inverse, log_determinant))
    return tuple(chunks)


def _restricted(jobs: Sequence[Blocks]) -> _Restricted:
    """``_Restricted`` for ``jobs`` at every grid covariance (``_grid``), by block count."""
    shape = (MACHINE_CORRELATIONS.size * WHITE_RATIOS.size, len(jobs))
    squares, determinants, slope, variance = (np.empty(shape) for _ in range(4))
    for n in sorted({job.values.size for job in jobs}):
        which = [i for i, job in enumerate(jobs) if job.values.size == n]
        values = np.stack([jobs[i].values for i in which])
        # Jobs alike share a design (arms in the same blocks): each distinct one's pieces
        # are made once, ``at`` says which is each job's.
        distinct: dict[bytes, Floats] = {}
        for i in which:
            distinct.setdefault(jobs[i].design.tobytes(), jobs[i].design)
        place = {key: k for k, key in enumerate(distinct)}
        at = np.array([place[jobs[i].design.tobytes()] for i in which])
        design = np.stack(list(distinct.values()))
        for grid, inverses, log_determinant in _grid_inverses(n):
            inverse = inverses[:, None]  # grid point x 1 x n x n
            weighted = inverse @ design[None]  # grid point x design x n x p
            normal = design.transpose(0, 2, 1)[None] @ weighted
            normal_inverse = np.linalg.inv(normal)[:, at]  # grid point x job x p x p
            moment = (values[None, :, None, :] @ weighted[:, at])[:, :, 0, :]
            fitted = (normal_inverse @ moment[..., None])[..., 0]
            total = np.einsum("jn,gjn->gj", values, (inverse @ values[None, :, :, None])[..., 0])
            squares[grid, which] = total - np.einsum("gjp,gjp->gj", moment, fitted)
            determinants[grid, which] = (log_determinant[:, None]
                                         + np.linalg.slogdet(normal)[1][:, at])
            slope[grid, which] = fitted[:, :, -1]
            variance[grid, which] = normal_inverse[:, :, -1, -1]
    df = np.array([job.values.size - job.design.shape[1] for job in jobs], dtype=float)
    return _Restricted(squares, determinants, slope, variance, df)


def _likelihood(squares: Floats, df: Floats | float, determinants: Floats) -> Floats:
    """The restricted log likelihood, the scale profiled out, of jobs whose residual sums
    of squares, df and log determinants (``_Restricted``) add up to these."""
    found: Floats = -0.5 * (df * np.log(np.maximum(squares, 1e-300) / df) + determinants)
    return found


def _against_machine(job: Blocks, earlier: Sequence[Blocks]
                     ) -> tuple[float, float, float] | None:
    """The job's slope and its interval against the slopes of the machine's ``earlier``
    jobs, or None when the job's block noise is not like theirs (``MISFIT``).

    The block noise's correlation and white share are the earlier jobs' (restricted
    maximum likelihood, each job with its own coefficients, trend included); at that
    covariance each job's generalised least squares slope, over its standard deviation at
    unit scale, is the same normal variable on a steady machine, so the job's, over the root
    mean square of the earlier jobs', is Student's t on as many df as there are earlier
    jobs (the interval's level ``LEVEL``). A trend in an earlier job only widens the
    reference: the test stays valid.
    """
    fits = _restricted([job, *earlier])
    squares, df = fits.squares[:, 1:], fits.df[1:]
    determinants = fits.determinants[:, 1:]
    total, total_df = squares.sum(axis=1), float(df.sum())
    total_determinant = determinants.sum(axis=1)
    best = int(_likelihood(total, total_df, total_determinant).argmax())
    misfit = (fits.squares[best, 0] / fits.df[0]) / (total[best] / total_df)
    if not misfit < math.inf or f_cdf(misfit, fits.df[0], total_df) > MISFIT:
        return None
    # Each earlier job is standardised at the covariance the others choose, as the job is
    # at the one they all choose: chosen on its own noise, its slope would look smaller.
    chosen = _likelihood(total[:, None] - squares, total_df - df,
                         total_determinant[:, None] - determinants).argmax(axis=0)
    column = np.arange(1, len(earlier) + 1)
    standard = fits.slope[chosen, column] / np.sqrt(fits.variance[chosen, column])
    error = math.sqrt(float(fits.variance[best, 0]) * float(np.mean(standard ** 2)))
    slope = float(fits.slope[best, 0])
    reach = t_margin(error, len(earlier), LEVEL)
    return slope, slope - reach, slope + reach


def _alone(job: Blocks) -> tuple[float, float, float, bool]:
    """The job's slope, its interval and the flag from its own blocks: the likelihood ratio
    test (``drift``)."""
    design, value = job.design, job.values
    full, coefficients, errors = fit_ar1(design, value[None, :])
    slope, error = float(coefficients[0, -1]), float(errors[0])
    critical = critical_root(len(value))
    flag = bool(_root(design, value[None, :], full, 0.0)[0] > critical)
    low = _interval_end(design, value, float(full[0]), slope, -error, critical)
    high = _interval_end(design, value, float(full[0]), slope, error, critical)
    if not flag:  # zero is not rejected: the interval holds it
        low, high = min(low, 0.0), max(high, 0.0)
    return slope, low, high, flag


def drift(runs: pd.DataFrame, earlier: Sequence[pd.DataFrame] = ()) -> Drift:
    """A trend over every block of the job, both arms, tested against zero, allowing for
    blocks whose noise is strongly correlated from one to the next.

    Each block gives one value, the mean over the job's prompts of the log median decode
    tok/s; the fit has an arm term and a term for a pair's first block (so a speedup or a
    carry-over is not read as drift) and a slope on the block index. Counterbalancing and
    the crossover model keep a linear drift out of the speedup; the flag says the machine
    was not steady.

    With ``EARLIER_MIN`` or more of the machine's ``earlier`` jobs (runs frames, latest
    first) that ran the same prompts and repetitions a block, the latest ``EARLIER_MAX``,
    the slope is tested against theirs (``_against_machine``: the interval is Student's t
    on as many df as earlier jobs, at ``LEVEL``, and the flag is set when it leaves out
    zero), unless the job was noisier than they were (``MISFIT``). Otherwise, from the
    job's blocks alone: consecutive blocks share the machine's state, so their noise is
    autocorrelated, and the slope is tested by the likelihood ratio of AR(1) models with and
    without it (each with its own correlation, ``likelihood_ratio``), whose root is compared
    with a critical value that holds false positives at 5% for block correlations up to 0.8
    (``CRITICAL``). Its interval is the slopes that test does not reject (the profile
    likelihood's; where those are not one stretch, the stretch around the fitted slope,
    widened to zero when zero is not rejected), so the flag is set exactly when it leaves
    out zero.
    """
    job = job_blocks(runs)
    if job is None:
        return Drift(0.0, NAN, NAN, 0.0, False)
    alike = _alike(runs, earlier) if len(earlier) >= EARLIER_MIN else []
    found = _against_machine(job, alike) if len(alike) >= EARLIER_MIN else None
    if found is not None:
        slope, low, high = found
        flag = bool(low > 0 or high < 0)
    else:
        slope, low, high, flag = _alone(job)
    return Drift(slope, low, high, math.expm1(slope * job.span), flag,
                 len(alike) if found is not None else 0)


def _alike(runs: pd.DataFrame, earlier: Sequence[pd.DataFrame]) -> list[Blocks]:
    """The ``Blocks`` of the first ``EARLIER_MAX`` of ``earlier`` that ran the job's prompts
    and repetitions a block (``block_layout``) and have a trend to test."""
    layout = block_layout(runs)
    alike = (job_blocks(frame) for frame in earlier if block_layout(frame) == layout)
    return list(islice((blocks for blocks in alike if blocks is not None), EARLIER_MAX))
