"""Engine cost curve: what one engine delivers at each acceptance length, from its
synthetic-acceptance jobs (a random-effects meta-regression, a line or, when a lack-of-fit
test finds curvature, a quadratic)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from farm.stats.distributions import student_t_cdf
from farm.stats.frame import NAN, LogRatios
from farm.stats.intervals import t_margin
from farm.stats.pooling import shrunk_variances

# The lack-of-fit test's level, fixed before any simulation looked at it: the curvature
# term is kept when its t test (Knapp-Hartung, points - 3 df) rejects a line at 0.10.
# A line's false alarms cost width, a missed bend costs bias, so the level leans to power.
LACK_OF_FIT_LEVEL = 0.10

Matrix3 = tuple[tuple[float, float, float], tuple[float, float, float],
                tuple[float, float, float]]
_NO_COVARIANCE: Matrix3 = ((NAN, NAN, NAN), (NAN, NAN, NAN), (NAN, NAN, NAN))


@dataclass(frozen=True)
class CostCurve:
    """What one engine (build x model x GPU class x spec type) delivers at one draft length:
    the speedup in the mean acceptance length L (tokens per speculative step, the target's
    included), fitted to synthetic-acceptance jobs.

    A step that drafts k tokens costs about the same whatever is accepted, so the speedup
    is L / step cost: nearly a line in L. Rollbacks (a recurrent model replays a partly
    accepted draft), drafts that stop early and a step cost that grows with the accepted
    tokens bend it; a lack-of-fit test adds a curvature term (``curvature`` * L^2) when the
    line does not fit (its p value ``lack_of_fit_p``, NaN below 4 points), and ``tau``
    measures what the fit leaves.

    ``intercept`` + ``slope`` * L + ``curvature`` * L^2 with ``covariance`` (Knapp-Hartung,
    3 x 3, the curvature's row zero for a line; ``df`` = points - parameters), fitted over
    measured lengths ``lengths`` (min, max): outside them a prediction is an extrapolation.
    """

    draft_n_max: int
    intercept: float
    slope: float
    curvature: float
    covariance: Matrix3
    df: int
    tau: float
    points: int
    lengths: tuple[float, float]
    lack_of_fit_p: float

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """The fit's intercept, slope and curvature."""
        return self.intercept, self.slope, self.curvature

    def gradient(self, length: float) -> float:
        """The speedup's derivative in L at ``length``."""
        return self.slope + 2.0 * self.curvature * length

    def standard_error(self, length: float) -> float:
        """The standard error of the fit at ``length`` (speedup units); NaN without df."""
        if self.df < 1:
            return NAN
        basis = np.array([1.0, length, length * length])
        return math.sqrt(max(float(basis @ np.array(self.covariance) @ basis), 0.0))

    def _margin(self, length: float, level: float) -> float:
        if self.df < 1:
            return NAN
        return t_margin(self.standard_error(length), self.df, level)

    def speedup(self, length: float, level: float = 0.95) -> tuple[float, float, float]:
        """The speedup the engine gives at acceptance length ``length``, with its interval
        (the fit's, not a new job's: it holds the engine's cost, not one job's noise)."""
        value = self.intercept + self.slope * length + self.curvature * length * length
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
        that side out (the fit is not clearly rising there)."""
        if self.curvature != 0.0:
            return self._curved_break_even(level)
        if not self.slope > 0:
            return NAN, NAN, NAN
        estimate = (1.0 - self.intercept) / self.slope
        if self.df < 1:
            return estimate, NAN, NAN
        v00, v01, v11 = self.covariance[0][0], self.covariance[0][1], self.covariance[1][1]
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

    def _curved_break_even(self, level: float) -> tuple[float, float, float]:
        # The rising root of the quadratic = 1, and the run of lengths around it whose
        # interval holds 1, on a fine grid from 0 past the root; each end is the first grid
        # length outside (a grid step conservative), an open end where none is.
        roots = np.roots([self.curvature, self.slope, self.intercept - 1.0])
        rising = [float(r.real) for r in roots if abs(r.imag) < 1e-12 and r.real > 0
                  and self.gradient(float(r.real)) > 0]
        if not rising:
            return NAN, NAN, NAN
        estimate = min(rising)
        grid = np.linspace(0.0, max(3.0 * self.lengths[1], 2.0 * estimate), 6001)
        basis = np.column_stack([np.ones(grid.size), grid, grid * grid])
        spread = np.einsum("ij,jk,ik->i", basis, np.array(self.covariance), basis)
        margin = t_margin(1.0, self.df, level) * np.sqrt(np.maximum(spread, 0.0))
        outside = np.abs(basis @ np.array(self.coefficients) - 1.0) > margin
        left = np.flatnonzero(outside & (grid < estimate))
        right = np.flatnonzero(outside & (grid > estimate))
        return (estimate, float(grid[left[-1]]) if left.size else -math.inf,
                float(grid[right[0]]) if right.size else math.inf)


Fit = tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], float]


def _meta_regression(design: npt.NDArray[np.float64], y: npt.NDArray[np.float64],
                     log_variance: npt.NDArray[np.float64]) -> Fit:
    """Coefficients, their Knapp-Hartung covariance (scale truncated at 1; NaN without df)
    and tau^2 of a random-effects regression of ``y`` on ``design``."""

    def fit(weights: npt.NDArray[np.float64]) -> tuple[npt.NDArray[np.float64],
                                                       npt.NDArray[np.float64]]:
        inverse = np.asarray(np.linalg.inv(design.T @ (weights[:, None] * design)),
                             dtype=np.float64)
        return inverse @ design.T @ (weights * y), inverse

    points, parameters = design.shape
    beta, _ = fit(1.0 / (log_variance * y**2))
    variance = log_variance * np.maximum(design @ beta, 1e-3) ** 2
    weights = 1.0 / variance
    beta, inverse = fit(weights)
    q = float(np.sum(weights * (y - design @ beta) ** 2))
    df = points - parameters
    # tr(P) for the weighted regression: sum(w) - tr((X'WX)^-1 X'W^2X).
    trace = float(np.sum(weights) - np.trace(inverse @ design.T @ ((weights**2)[:, None]
                                                                  * design)))
    tau2 = max(0.0, (q - df) / trace) if df > 0 and trace > 0 else 0.0
    weights = 1.0 / (variance + tau2)
    beta, inverse = fit(weights)
    if df > 0:
        # Knapp-Hartung's scale truncated at 1, as pool_jobs's.
        scale = max(1.0, float(np.sum(weights * (y - design @ beta) ** 2)) / df)
        return beta, scale * inverse, tau2
    return beta, np.full(inverse.shape, NAN), tau2


def _curvature_p(beta: npt.NDArray[np.float64], covariance: npt.NDArray[np.float64],
                 df: int) -> float:
    """The two-sided p value of the quadratic term (the line's lack of fit)."""
    se = math.sqrt(float(covariance[2, 2])) if covariance[2, 2] > 0 else NAN
    if df < 1 or not math.isfinite(se):
        return NAN
    return 2.0 * (1.0 - student_t_cdf(abs(float(beta[2])) / se, df))


def cost_curve(draft_n_max: int, lengths: LogRatios, speedups: LogRatios,
               log_ses: LogRatios, dfs: Sequence[int]) -> CostCurve:
    """The ``CostCurve`` of one draft length from its synthetic-acceptance jobs: each job's
    measured acceptance length, speedup and log standard error.

    A random-effects meta-regression of speedup on length: each job weighs by its own
    variance plus the between-job variance tau^2 (method of moments, DerSimonian-Laird's
    estimator for a regression), and the coefficients' covariance is Knapp-Hartung's (scaled
    by the weighted residual mean square, truncated at 1) with a t on points - parameters
    df, as ``pool_jobs`` does for one mean. A job's variance is its log_se, shrunk toward
    the jobs' pooled one by its ``df`` as there, times the fitted (not its own) speedup,
    squared: weights that follow a job's own noise undercover. With 4 or more jobs the
    same regression with an L^2 term tests the line's lack of fit; the quadratic is kept
    when its curvature's p value is below ``LACK_OF_FIT_LEVEL``. Jobs without a standard
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
    measured = (float(x.min()), float(x.max())) if points else (NAN, NAN)
    if points < 2 or float(np.ptp(x)) == 0.0:
        return CostCurve(draft_n_max, NAN, NAN, 0.0, _NO_COVARIANCE, 0, NAN, points,
                         measured, NAN)
    log_variance = shrunk_variances(np.maximum(log_se, 1e-9) ** 2, df_job)
    lack_of_fit_p = NAN
    if points >= 4 and np.unique(x).size >= 3:
        design = np.column_stack([np.ones(points), x, x * x])
        beta, covariance, tau2 = _meta_regression(design, y, log_variance)
        lack_of_fit_p = _curvature_p(beta, covariance, points - 3)
    if not lack_of_fit_p < LACK_OF_FIT_LEVEL:
        design = np.column_stack([np.ones(points), x])
        line, line_covariance, tau2 = _meta_regression(design, y, log_variance)
        beta = np.append(line, 0.0)
        covariance = np.zeros((3, 3))
        covariance[:2, :2] = line_covariance
    df = points - (3 if beta[2] != 0.0 else 2)
    return CostCurve(draft_n_max, float(beta[0]), float(beta[1]), float(beta[2]),
                     _matrix3(covariance), df, math.sqrt(tau2), points, measured,
                     lack_of_fit_p)


def _matrix3(matrix: npt.NDArray[np.float64]) -> Matrix3:
    rows = [tuple(float(v) for v in row) for row in matrix]
    return ((rows[0][0], rows[0][1], rows[0][2]), (rows[1][0], rows[1][1], rows[1][2]),
            (rows[2][0], rows[2][1], rows[2][2]))
