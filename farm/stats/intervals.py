"""Intervals on the log scale: a speedup with its interval, and the t margin every interval
of the farm is made of (one place). Pure math on floats, no numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass

from farm.stats.distributions import student_t_quantile

NAN = float("nan")


@dataclass(frozen=True)
class Interval:
    """A speedup (variant / baseline, ratio scale) with its interval over ``pairs`` pairs.

    ``low`` and ``high`` are NaN below two pairs: one pair says nothing about the spread.
    """

    estimate: float
    low: float
    high: float
    pairs: int

    @property
    def half_width(self) -> float:
        """Half the interval's width relative to the estimate (0.03 means about ±3%)."""
        return (self.high - self.low) / 2 / self.estimate


def t_margin(standard_error: float, df: float, level: float = 0.95,
             comparisons: int = 1) -> float:
    """The half-width of a two-sided t interval at ``level`` around an estimate with this
    standard error and df; with ``comparisons`` m > 1, at level 1 - (1 - level) / m
    (Bonferroni: m intervals that cover together at least ``level``)."""
    p = (0.5 + level / 2.0 if comparisons == 1
         else 1.0 - (1.0 - level) / (2.0 * max(comparisons, 1)))
    return student_t_quantile(p, df) * standard_error


def log_interval(log_value: float, log_se: float, df: float, level: float = 0.95,
                 comparisons: int = 1) -> tuple[float, float]:
    """exp(log_value -/+ the t margin): a ratio's interval from its log and standard error;
    NaN without a usable standard error."""
    if df < 1 or not math.isfinite(log_se):
        return NAN, NAN
    margin = t_margin(log_se, df, level, comparisons)
    return math.exp(log_value - margin), math.exp(log_value + margin)


def log_standard_error(low: float, high: float, pairs: int, level: float = 0.95) -> float:
    """The standard error of a job's log speedup, read back from its paired-t interval."""
    if pairs < 2 or not (low > 0 and high > 0):
        return NAN
    return (math.log(high) - math.log(low)) / (2.0 * t_margin(1.0, pairs - 1, level))


def best_of_interval(log_speedup: float, log_se: float, df: int, variants: int,
                     level: float = 0.95) -> tuple[float, float]:
    """The interval to quote for the best-looking of ``variants`` jobs: Bonferroni, each of
    the m intervals at level 1 - (1 - level) / m, so all of them, and hence the one picked
    for looking best, cover together at least ``level`` of the time. The plain interval of
    a best-of-20 pick covers about 0.7 (tests/unit/test_stats.py)."""
    return log_interval(log_speedup, log_se, df, level, max(variants, 1))
