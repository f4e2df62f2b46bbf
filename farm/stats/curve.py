"""Engine cost curve: what one engine delivers at each acceptance length, from its
synthetic-acceptance jobs (a random-effects meta-regression)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from farm.stats.frame import NAN, LogRatios
from farm.stats.intervals import t_margin
from farm.stats.pooling import shrunk_variances


@dataclass(frozen=True)
class CostCurve:
    """What one engine (build x model x GPU class x spec type) delivers at one draft length:
    the speedup as a straight line in the mean acceptance length L (tokens per speculative
    step, the target's included), fitted to synthetic-acceptance jobs.

    A step that drafts k tokens costs the same whatever is accepted, give or take a rollback,
    so the time per token is step cost / L and the speedup L / step cost: a line through the
    origin. Rollbacks (a recurrent model replays a partly accepted draft) and drafts that
    stop early bend it; the line's intercept absorbs that, ``tau`` measures what it leaves.

    ``intercept`` + ``slope`` * L with ``covariance`` (Knapp-Hartung, ``df`` = points - 2),
    fitted over measured lengths ``lengths`` (min, max): outside them a prediction is an
    extrapolation.
    """

    draft_n_max: int
    intercept: float
    slope: float
    covariance: tuple[tuple[float, float], tuple[float, float]]
    df: int
    tau: float
    points: int
    lengths: tuple[float, float]

    def standard_error(self, length: float) -> float:
        """The standard error of the line at ``length`` (speedup units); NaN below 3 points."""
        (v00, v01), (_, v11) = self.covariance
        if self.df < 1:
            return NAN
        return math.sqrt(max(v00 + 2.0 * length * v01 + length * length * v11, 0.0))

    def _margin(self, length: float, level: float) -> float:
        if self.df < 1:
            return NAN
        return t_margin(self.standard_error(length), self.df, level)

    def speedup(self, length: float, level: float = 0.95) -> tuple[float, float, float]:
        """The speedup the engine gives at acceptance length ``length``, with its interval
        (the line's, not a new job's: it holds the engine's cost, not one job's noise)."""
        value = self.intercept + self.slope * length
        margin = self._margin(length, level)
        return value, max(value - margin, 0.0), value + margin

    def step_cost(self, level: float = 0.95) -> tuple[float, float, float]:
        """The cost of one speculative step with ``draft_n_max`` drafted tokens, all of them
        accepted (k + 1 tokens, nothing rolled back), relative to one plain decode step:
        (k + 1) / speedup(k + 1), with its interval."""
        full = self.draft_n_max + 1.0
        value, low, high = self.speedup(full, level)
        return (full / value if value > 0 else NAN, full / high if high > 0 else NAN,
                full / low if low > 0 else math.inf)

    def break_even(self, level: float = 0.95) -> tuple[float, float, float]:
        """The acceptance length at which the speedup is 1, with its Fieller interval: every
        L whose speedup interval contains 1. An infinite end means the data cannot rule
        that side out (the slope is not clearly positive)."""
        if not self.slope > 0:
            return NAN, NAN, NAN
        estimate = (1.0 - self.intercept) / self.slope
        if self.df < 1:
            return estimate, NAN, NAN
        (v00, v01), (_, v11) = self.covariance
        t2 = t_margin(1.0, self.df, level) ** 2
        # (a + bL - 1)^2 <= t^2 (v00 + 2 L v01 + L^2 v11): a quadratic in L.
        a0 = self.intercept - 1.0
        qa = self.slope**2 - t2 * v11
        qb = 2.0 * (a0 * self.slope - t2 * v01)
        qc = a0 * a0 - t2 * v00
        if qa <= 0:
            return estimate, -math.inf, math.inf
        # The estimate itself meets the inequality, so the roots are real (up to rounding).
        root = math.sqrt(max(qb * qb - 4.0 * qa * qc, 0.0))
        return estimate, (-qb - root) / (2.0 * qa), (-qb + root) / (2.0 * qa)


def cost_curve(draft_n_max: int, lengths: LogRatios, speedups: LogRatios,
               log_ses: LogRatios, dfs: Sequence[int]) -> CostCurve:
    """The ``CostCurve`` of one draft length from its synthetic-acceptance jobs: each job's
    measured acceptance length, speedup and log standard error.

    A random-effects meta-regression of speedup on length: each job weighs by its own
    variance plus the between-job variance tau^2 (method of moments, DerSimonian-Laird's
    estimator for a regression), and the coefficients' covariance is Knapp-Hartung's (scaled
    by the weighted residual mean square, truncated at 1) with a t on points - 2 df, as
    ``pool_jobs`` does for one mean. A job's variance is its log_se, shrunk toward the
    jobs' pooled one by its ``df`` as there, times the fitted (not its own) speedup,
    squared: weights that follow a job's own noise undercover. Jobs without a standard
    error are left out; fewer than three jobs give no interval (NaN margins).
    """
    x = np.asarray(lengths, dtype=float)
    y = np.asarray(speedups, dtype=float)
    log_se = np.asarray(log_ses, dtype=float)
    df_job = np.asarray(dfs, dtype=float)
    usable = (np.isfinite(x) & np.isfinite(y) & np.isfinite(log_se) & (y > 0)
              & (df_job >= 1))
    x, y, log_se, df_job = x[usable], y[usable], log_se[usable], df_job[usable]
    points = int(x.size)
    if points < 2 or float(np.ptp(x)) == 0.0:
        return CostCurve(draft_n_max, NAN, NAN, ((NAN, NAN), (NAN, NAN)), 0, NAN, points,
                         (float(x.min()), float(x.max())) if points else (NAN, NAN))
    design = np.column_stack([np.ones(points), x])
    log_variance = shrunk_variances(np.maximum(log_se, 1e-9) ** 2, df_job)

    def fit(weights: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64],
                                                       npt.NDArray[np.float64]]:
        inverse = np.linalg.inv(design.T @ (weights[:, None] * design))
        return inverse @ design.T @ (weights * y), inverse

    beta, _ = fit(1.0 / (log_variance * y**2))
    variance = log_variance * np.maximum(design @ beta, 1e-3) ** 2
    weights = 1.0 / variance
    beta, inverse = fit(weights)
    q = float(np.sum(weights * (y - design @ beta) ** 2))
    df = points - 2
    # tr(P) for the weighted regression: sum(w) - tr((X'WX)^-1 X'W^2X).
    trace = float(np.sum(weights) - np.trace(inverse @ design.T @ ((weights**2)[:, None]
                                                                  * design)))
    tau2 = max(0.0, (q - df) / trace) if df > 0 and trace > 0 else 0.0
    weights = 1.0 / (variance + tau2)
    beta, inverse = fit(weights)
    if df > 0:
        # Knapp-Hartung's scale truncated at 1, as pool_jobs's.
        scale = max(1.0, float(np.sum(weights * (y - design @ beta) ** 2)) / df)
        covariance = scale * inverse
    else:
        covariance = np.full((2, 2), NAN)
    return CostCurve(draft_n_max, float(beta[0]), float(beta[1]),
                     ((float(covariance[0, 0]), float(covariance[0, 1])),
                      (float(covariance[1, 0]), float(covariance[1, 1]))),
                     df, math.sqrt(tau2), points, (float(x.min()), float(x.max())))
