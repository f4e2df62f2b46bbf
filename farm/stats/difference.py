"""A test of a difference: has a job's speedup (or any series' log value) changed between
two measurements, and which of many such changes to call, at a controlled false discovery
rate. ``farm compare`` calls it per matching job; history, bisect and CI gates are meant to.

The unit is the difference of the two log values, with the standard error of a difference
of independent estimates and its own Welch-Satterthwaite df, not two intervals that fail to
overlap (a test at about 0.006 for equal errors, with little power). Across the jobs
compared, Benjamini-Hochberg keeps the expected share of false calls among the calls at
``rate`` (docs/statistics.md: its measured error rate and power).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from farm.stats.distributions import student_t_cdf
from farm.stats.intervals import NAN, t_margin

# The false discovery rate a set of comparisons is held to.
FDR = 0.05


@dataclass(frozen=True)
class Difference:
    """B over A on the ratio scale (``change``: exp of the difference of the logs) with its
    interval at the level asked, the difference's log standard error, df and two-sided p
    value (NaN where either side lacks a standard error)."""

    change: float
    low: float
    high: float
    log_se: float
    df: float
    p_value: float


def difference(log_a: float, se_a: float, df_a: float, log_b: float, se_b: float,
               df_b: float, level: float = 0.95) -> Difference:
    """The difference log_b - log_a of two independent estimates, each with its standard
    error and df: a t on Welch-Satterthwaite's df, (se_a^2 + se_b^2)^2 /
    (se_a^4 / df_a + se_b^4 / df_b)."""
    change = math.exp(log_b - log_a) if math.isfinite(log_a) and math.isfinite(log_b) else NAN
    usable = all(math.isfinite(value) for value in (log_a, log_b, se_a, se_b, df_a, df_b))
    if not (usable and df_a >= 1 and df_b >= 1 and se_a * se_a + se_b * se_b > 0):
        return Difference(change, NAN, NAN, NAN, NAN, NAN)
    variance = se_a * se_a + se_b * se_b
    df = variance**2 / (se_a**4 / df_a + se_b**4 / df_b)
    se = math.sqrt(variance)
    delta = log_b - log_a
    margin = t_margin(se, df, level)
    p_value = 2.0 * (1.0 - student_t_cdf(abs(delta) / se, df))
    return Difference(change, math.exp(delta - margin), math.exp(delta + margin), se, df,
                      min(max(p_value, 0.0), 1.0))


def adjusted_p_values(p_values: Sequence[float]) -> list[float]:
    """Benjamini-Hochberg's adjusted p values (q values), in the order given: a comparison
    is a discovery at false discovery rate q when its adjusted p value is at most q. NaN
    (no test) stays NaN and does not count among the tests."""
    tested = sorted((p, i) for i, p in enumerate(p_values) if math.isfinite(p))
    adjusted = [NAN] * len(p_values)
    smallest = 1.0
    for rank in range(len(tested), 0, -1):
        p, i = tested[rank - 1]
        smallest = min(smallest, p * len(tested) / rank)
        adjusted[i] = smallest
    return adjusted


def ratio_p_value(log_value: float, log_se: float, df: float) -> float:
    """The two-sided p value of a log ratio against 0 (a speedup against 1): a t on ``df``;
    NaN without a standard error."""
    if not (math.isfinite(log_value) and math.isfinite(log_se) and log_se > 0
            and math.isfinite(df) and df >= 1):
        return NAN
    return min(max(2.0 * (1.0 - student_t_cdf(abs(log_value) / log_se, df)), 0.0), 1.0)


def verdicts(ratios: Sequence[float], p_values: Sequence[float], up: str, down: str,
             rate: float = FDR) -> list[str]:
    """Each comparison's verdict, its false discovery rate held at ``rate`` across all of
    them (Benjamini-Hochberg): ``up`` or ``down`` (the ratio's side of 1) where it is a
    discovery, "within noise" where not, "no interval" where it has no test."""
    called = discoveries(p_values, rate)
    return ["no interval" if not math.isfinite(p) else (up if ratio > 1.0 else down)
            if call else "within noise"
            for ratio, p, call in zip(ratios, p_values, called, strict=True)]


def discoveries(p_values: Sequence[float], rate: float = FDR) -> list[bool]:
    """Which comparisons to call changed, the false discovery rate held at ``rate``
    (Benjamini-Hochberg, valid for independent or positively dependent tests)."""
    return [math.isfinite(q) and q <= rate for q in adjusted_p_values(p_values)]
