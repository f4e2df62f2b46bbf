"""Two pieces a history's tests need that a single comparison does not: the spread of a
series between builds that no change explains (a machine that drifts between nights), and
calls made one at a time as builds arrive, at a false discovery rate held over the whole
stream (LORD++: Javanmard & Montanari 2018, Ramdas et al. 2017).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from farm.stats.intervals import NAN

# What a history assumes of the between-build spread of a series that drifts between jobs
# (tok/s, timers) before it has transitions to learn from, and how many transitions' worth
# that counts for: 2% (log scale) on 4 df.
PRIOR_TAU, PRIOR_DF = 0.02, 4.0
# The median of a chi-square on 1 df: a standardised difference squared falls below it as
# often as above it when the variance is right.
_CHI2_1_MEDIAN = 0.45493642311957283


def between_build_variance(differences: npt.ArrayLike, within: npt.ArrayLike,
                           prior: bool) -> tuple[float, float]:
    """The variance tau^2 that each build's value has beyond its own standard error, from
    earlier transitions of the series, and its df.

    When nothing changed, a difference d of two consecutive builds' log values has variance
    ``within`` (their standard errors squared, summed) + 2 tau^2. A first, robust guess:
    the median over the transitions of (d^2 / m - within) / 2, m the median of a chi-square
    on 1 df. Transitions beyond 3 standard deviations of that guess are changes, not
    spread, and are left out; over the rest, tau^2 = mean(d^2 - within) / 2, at least 0,
    on as many df as transitions kept. With a ``prior`` (a series that a machine's drift
    between jobs moves), ``PRIOR_TAU``^2 on ``PRIOR_DF`` df is averaged in, so that a short
    history does not read a drifting machine as changes; without, a series with no
    transitions yet has none."""
    d = np.asarray(differences, dtype=float)
    w = np.asarray(within, dtype=float)
    used = np.isfinite(d) & np.isfinite(w) & (w >= 0)
    d, w = d[used], w[used]
    weight = PRIOR_DF if prior else 0.0
    if d.size == 0:
        return PRIOR_TAU**2 if prior else 0.0, weight
    guess = max(float(np.median((d * d / _CHI2_1_MEDIAN - w) / 2.0)), 0.0)
    quiet = d * d <= 9.0 * (w + 2.0 * guess)
    kept = float(quiet.sum())
    found = max(float(np.mean(d[quiet] ** 2 - w[quiet])) / 2.0, 0.0)
    if weight + kept == 0:
        return 0.0, 0.0
    return (weight * PRIOR_TAU**2 + kept * found) / (weight + kept), weight + kept


def with_between(se: float, df: float, tau2: float, tau_df: float) -> tuple[float, float]:
    """A build value's standard error and df once the between-build variance tau^2
    (estimated on ``tau_df`` df) is added: sqrt(se^2 + tau^2), its df by
    Welch-Satterthwaite."""
    if not (math.isfinite(se) and math.isfinite(df)) or tau2 <= 0:
        return se, df
    variance = se * se + tau2
    denominator = (se**4 / df if df > 0 else 0.0) + tau2 * tau2 / max(tau_df, 1.0)
    return math.sqrt(variance), variance * variance / denominator


def _gamma(j: int) -> float:
    """LORD++'s spending sequence (Javanmard & Montanari's shape), summing to just under 1
    over j = 1, 2, ...: the share of the wealth the j-th test after it was earned may spend."""
    return 0.0790 * math.log(max(j, 2)) / (j * math.exp(math.sqrt(math.log(j))))


def lord_levels(p_values: list[float], rate: float) -> tuple[list[float], list[bool]]:
    """LORD++ over tests in the order they arrived: each test's level and whether it was
    called. A test's level depends only on the tests before it, so a call, once made,
    never changes as later builds arrive; the false discovery rate over the stream is held
    at ``rate`` (independent p values). Untested entries (NaN) take no level and spend
    nothing."""
    initial = rate
    calls: list[int] = []  # the test numbers (1, 2, ...) of the calls so far
    levels: list[float] = []
    called: list[bool] = []
    number = 0
    for p in p_values:
        if not math.isfinite(p):
            levels.append(NAN)
            called.append(False)
            continue
        number += 1
        level = _gamma(number) * initial
        if calls:
            level += (rate - initial) * _gamma(number - calls[0])
            level += rate * sum(_gamma(number - made) for made in calls[1:])
        levels.append(level)
        called.append(p <= level)
        if p <= level:
            calls.append(number)
    return levels, called
