"""Jobs combined: the typical speedup of a group, random effects over jobs' log speedups."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from farm.stats.frame import NAN, LogRatios
from farm.stats.intervals import t_margin


def shrunk_variances(variances: npt.NDArray[np.float64],
                     dfs: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Each variance (from a few pairs, ``dfs``) shrunk toward the df-weighted pooled one
    by its own df against a prior of the mean df: weights that chase noisy variances
    undercover."""
    pooled = float(np.sum(dfs * variances) / np.sum(dfs))
    shrunk: npt.NDArray[np.float64] = (dfs * variances + dfs.mean() * pooled) / (dfs + dfs.mean())
    return shrunk


@dataclass(frozen=True)
class Pooled:
    """The typical speedup of a group of jobs (ratio scale) with its interval, the number
    of jobs combined and ``tau``, the between-job standard deviation of log speedups;
    ``log_se`` and ``df``, the interval's standard error of the log and its df (NaN
    without an interval), for a test against no change."""

    estimate: float
    low: float
    high: float
    jobs: int
    tau: float
    log_se: float = NAN
    df: float = NAN


def pool_jobs(log_speedups: LogRatios, standard_errors: LogRatios, dfs: Sequence[int],
              level: float = 0.95) -> Pooled:
    """Random-effects combination of jobs' log speedups: DerSimonian-Laird between-job
    variance, Hartung-Knapp-Sidik-Jonkman t interval (df = jobs - 1), its scale truncated at 1.

    It answers "what speedup does a typical configuration of this group get", so its width
    shrinks with more jobs and grows when jobs truly differ. Jobs without a standard error
    (fewer than two pairs) are left out; one job gives its own paired-t interval.

    Each job's variance comes from a handful of pairs, so before weighting it is shrunk
    toward the jobs' pooled variance (its own df against a prior of the mean df): weights
    that chase noisy variances undercover (0.915 for 16 alike jobs in simulation; 0.946 with
    the shrinkage, and 0.94-0.972 when jobs' noise differs eightfold).
    """
    y = np.asarray(log_speedups, dtype=float)
    se = np.asarray(standard_errors, dtype=float)
    df = np.asarray(dfs, dtype=float)
    usable = np.isfinite(y) & np.isfinite(se) & (df >= 1)
    y, se, df = y[usable], np.maximum(se[usable], 1e-12), df[usable]
    jobs = int(y.size)
    if jobs == 0:
        return Pooled(NAN, NAN, NAN, 0, NAN)
    if jobs == 1:
        margin = t_margin(float(se[0]), float(df[0]), level)
        return Pooled(math.exp(y[0]), math.exp(y[0] - margin), math.exp(y[0] + margin), 1, NAN,
                      float(se[0]), float(df[0]))
    variance = shrunk_variances(se**2, df)
    weights = 1.0 / variance
    fixed = float(np.sum(weights * y) / np.sum(weights))
    q = float(np.sum(weights * (y - fixed) ** 2))
    scale = float(np.sum(weights) - np.sum(weights**2) / np.sum(weights))
    tau2 = max(0.0, (q - (jobs - 1)) / scale)
    random_weights = 1.0 / (variance + tau2)
    mean = float(np.sum(random_weights * y) / np.sum(random_weights))
    # HKSJ's scale, truncated at 1 (never narrower than the interval the weights alone
    # give): untruncated, two alike jobs gave a zero-width interval, and one narrower than
    # the fixed-effect one in 10.7% of pairs of alike jobs.
    scale_q = max(1.0, float(np.sum(random_weights * (y - mean) ** 2)) / (jobs - 1))
    hksj = scale_q / float(np.sum(random_weights))
    margin = t_margin(math.sqrt(hksj), jobs - 1, level)
    return Pooled(math.exp(mean), math.exp(mean - margin), math.exp(mean + margin), jobs,
                  math.sqrt(tau2), math.sqrt(hksj), float(jobs - 1))
