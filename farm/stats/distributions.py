"""Student's t and F distributions without scipy: pure math on floats (no numpy or
pandas), so that reports and plans can use them without loading either."""

from __future__ import annotations

import math
from functools import lru_cache

_TINY = 1e-300
_CF_EPS = 1e-15


def _nonzero(value: float) -> float:
    # Lentz's method divides by these terms; a tiny stand-in keeps it finite.
    return _TINY if abs(value) < _TINY else value


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz). Its loop
    writes ``_nonzero`` out (the same arithmetic, bit for bit): the simulations call it
    millions of times."""
    c, d = 1.0, 1.0 / _nonzero(1.0 - (a + b) * x / (a + 1.0))
    result = d
    for m in range(1, 100_000):
        twice = a + 2 * m
        numerator = m * (b - m) * x / ((twice - 1) * twice)
        d = 1.0 + numerator * d
        d = 1.0 / (_TINY if abs(d) < _TINY else d)
        c = 1.0 + numerator / c
        c = _TINY if abs(c) < _TINY else c
        result *= d * c
        numerator = -(a + m) * (a + b + m) * x / (twice * (twice + 1))
        d = 1.0 + numerator * d
        d = 1.0 / (_TINY if abs(d) < _TINY else d)
        c = 1.0 + numerator / c
        c = _TINY if abs(c) < _TINY else c
        result *= d * c
        if abs(d * c - 1.0) < _CF_EPS:
            return result
    raise ArithmeticError(f"incomplete beta did not converge (a={a}, b={b}, x={x})")


def regularized_incomplete_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b), the regularized incomplete beta function."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b)
                 + a * math.log(x) + b * math.log1p(-x))
    # The fraction converges fast only below (a + 1) / (a + b + 2); use the symmetry above it.
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def _t_upper_tail(t: float, df: float) -> float:
    # P(T > t) for t >= 0, computed directly so that far tails keep their precision.
    return 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom."""
    tail = _t_upper_tail(abs(t), df)
    return 1.0 - tail if t >= 0 else tail


def f_cdf(x: float, df1: float, df2: float) -> float:
    """P(F <= x) for Fisher's F with ``df1`` and ``df2`` degrees of freedom."""
    if x <= 0.0:
        return 0.0
    return regularized_incomplete_beta(df1 / 2.0, df2 / 2.0, df1 * x / (df1 * x + df2))


# Past this quantile (p, with df from 1 to _FAST_DF) the bisection below checks a Newton
# root first and then decides each step farther than _SURE (relative) from it by comparing
# with the root: the tail there is beyond the target by far more than its rounding (a
# relative gap of at least about min(df, 2) * _SURE / 2 against errors near 1e-14 that
# vary with t; they grow with df, as 1 - df / (df + t^2) loses digits), so every step goes
# as it would by computing the tail, and the quantile is the same, bit for bit, in a third
# of the time.
_FAST_FROM, _FAST_DF, _SURE = 0.9, 1e4, 1e-11


def _t_density(t: float, df: float) -> float:
    return math.exp(math.lgamma((df + 1.0) / 2.0) - math.lgamma(df / 2.0)
                    - 0.5 * math.log(df * math.pi) - (df + 1.0) / 2.0 * math.log1p(t * t / df))


def _checked_root(tail: float, df: float, low: float, high: float) -> float | None:
    """Newton's root of ``_t_upper_tail(x, df) == tail`` in [low, high] (0 < low; on log
    tail against log x, nearly a line in t's tails), when the tail's comparison with
    ``tail`` changes within ``_SURE / 2`` of it (relative), else None."""
    x = math.sqrt(low * high)
    for _ in range(30):
        now = _t_upper_tail(x, df)
        step = (math.log(now) - math.log(tail)) * now / (_t_density(x, df) * x)
        x = min(max(x * math.exp(step), low), high)
        if abs(step) <= 1e-7:  # the next step would be below rounding: the check decides
            break
    if (_t_upper_tail(x * (1.0 - _SURE / 2.0), df) > tail
            and not _t_upper_tail(x * (1.0 + _SURE / 2.0), df) > tail):
        return x
    return None


@lru_cache(maxsize=4096)
def student_t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t (bisection on the CDF; cached, as loops ask often)."""
    if not 0.0 < p < 1.0 or df <= 0:
        raise ValueError(f"need 0 < p < 1 and df > 0, got p={p}, df={df}")
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df)
    tail = 1.0 - p
    low, high = 0.0, 1.0
    while _t_upper_tail(high, df) > tail:
        low, high = high, high * 2.0
    fast = p >= _FAST_FROM and 1.0 <= df <= _FAST_DF and low > 0.0
    root = _checked_root(tail, df, low, high) if fast else None

    def below_root(x: float) -> bool:  # _t_upper_tail(x, df) > tail
        if root is not None and abs(x - root) > _SURE * root:
            return x < root
        return _t_upper_tail(x, df) > tail

    for _ in range(200):
        middle = (low + high) / 2.0
        if below_root(middle):
            low = middle
        else:
            high = middle
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2.0
