"""A job's speedup over its block pairs: the pair values, the paired t, the crossover
model, and the estimate a design allows.

A job runs its two arms in blocks, one server start each, counterbalanced in pairs (AB, BA,
AB, ... or BA, AB, ...: the job key picks which arm opens). Repetitions inside one server
session share that session's state (placement, clocks, caches), so they are not independent
evidence: the unit of evidence is the block PAIR. Each pair gives one log speedup (the mean
over prompts of the log ratio of the arms' medians); the interval comes from a crossover
model on those pair values (``estimate``), and a two-stage rule fixes how many pairs a job
runs (``farm.stats.twostage``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.stats.design import MIN_SECOND_STAGE, PRECISION_LEVEL, Design
from farm.stats.frame import ARMS, NAN, LogRatios, Orders, check_one_job, valid_runs
from farm.stats.intervals import Interval, t_margin
from farm.words import ADJUSTED_SEQUENTIAL, SEQUENTIAL


def pair_log_ratios(runs: pd.DataFrame) -> pd.Series:
    """Per pair, the mean over prompts of log(variant median / baseline median) of decode tok/s.

    Medians are over the pair's repetitions of each prompt, so one outlier repetition does not
    move its pair. A pair is skipped unless every prompt of the job has both arms in it (a
    pair with one arm only, e.g. still running, or without a prompt's valid runs): averaging
    over a different prompt mix would mix prompts' different speedups into the pair-to-pair
    spread. Indexed by pair, ascending.
    """
    check_one_job(runs)
    valid = valid_runs(runs)
    if valid.empty:
        return pd.Series(dtype=float, name="log_ratio", index=pd.Index([], name="pair"))
    medians = (valid.groupby(["pair", "prompt_id", "arm"])["decode_tok_s"].median()
               .unstack("arm").reindex(columns=list(ARMS)))
    every = pd.MultiIndex.from_product([sorted(valid["pair"].unique()),
                                        sorted(runs["prompt_id"].unique())],
                                       names=["pair", "prompt_id"])
    medians = medians.reindex(every)
    ratio = medians["variant"] / medians["baseline"]
    log_ratio = pd.Series(np.log(ratio.to_numpy(dtype=float)), index=ratio.index)
    complete = log_ratio.notna().groupby(level="pair").all()
    by_pair = log_ratio.groupby(level="pair").mean()
    return by_pair[complete].astype(float).rename("log_ratio")


def pair_orders(runs: pd.DataFrame) -> pd.Series:
    """Per pair, +1 when the baseline ran its first block (AB) and -1 when the variant did."""
    check_one_job(runs)
    first = runs[runs["position"] == 0].groupby("pair")["arm"].first()
    return pd.Series(np.where(first == "baseline", 1, -1), index=first.index, name="order")


def speedup_interval(log_ratios: LogRatios, level: float = 0.95) -> Interval:
    """exp(mean log ratio) with a paired-t interval over pairs (df = pairs - 1), exponentiated.

    The t (not normal) quantile matters here: jobs stop at a handful of pairs.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level}")
    values = np.asarray(log_ratios, dtype=float)
    pairs = int(values.size)
    if pairs == 0:
        return Interval(NAN, NAN, NAN, 0)
    mean = float(values.mean())
    if pairs < 2:
        return Interval(math.exp(mean), NAN, NAN, pairs)
    margin = t_margin(float(values.std(ddof=1)), pairs - 1, level) / math.sqrt(pairs)
    return Interval(math.exp(mean), math.exp(mean - margin), math.exp(mean + margin), pairs)


@dataclass(frozen=True)
class Crossover:
    """The crossover model on pair values: value = speedup + order effect x order + noise,
    order +1 when the baseline opened the pair (AB) and -1 when the variant did (BA).

    ``log_speedup`` and ``order_effect`` are in log units; ``variance`` is the residual
    variance with ``df`` degrees of freedom; ``factor`` times the noise variance is the
    variance of the speedup's (and of the order effect's) estimate.
    """

    log_speedup: float
    order_effect: float
    variance: float
    factor: float
    df: int


def crossover(values: LogRatios, orders: Orders) -> Crossover:
    """Fit the crossover model: the speedup is the mean of the AB and BA pairs' means, so a
    carry-over or first-block effect, and a linear drift (which looks the same: the second
    block of an AB pair is the variant), cancel instead of widening the interval."""
    y = np.asarray(values, dtype=float)
    o = np.asarray(orders)
    ab, ba = y[o > 0], y[o < 0]
    if ab.size == 0 or ba.size == 0 or y.size < 3:
        return Crossover(NAN, NAN, NAN, NAN, 0)
    residual = np.concatenate([ab - ab.mean(), ba - ba.mean()])
    df = int(y.size - 2)
    return Crossover((ab.mean() + ba.mean()) / 2, (ab.mean() - ba.mean()) / 2,
                     float(residual @ residual) / df, order_factor(o), df)


def aligned_pairs(values: LogRatios, orders: Orders) -> tuple[npt.NDArray[np.float64],
                                                         npt.NDArray[np.int64],
                                                         npt.NDArray[np.int64]]:
    """Values, orders and pair numbers of the complete pairs. A Series (as pair_log_ratios
    and pair_orders return) is matched by its pair index; arrays by position, from pair 0."""
    if isinstance(values, pd.Series):
        index = values.index.to_numpy(dtype=np.int64)
        o = (orders.reindex(values.index) if isinstance(orders, pd.Series)
             else pd.Series(np.asarray(orders)[index]))
        order_values = o.fillna(0).to_numpy(dtype=np.int64)
    else:
        index = np.arange(len(values), dtype=np.int64)
        order_values = np.asarray(orders, dtype=np.int64)[:len(values)]
    y = np.asarray(values, dtype=float)
    keep = np.isfinite(y) & (order_values != 0)
    return y[keep], order_values[keep], index[keep]


def crossover_margin(variance: float, factor: float, df: int, level: float) -> float:
    """The crossover estimate's t margin: noise ``variance`` times its ``factor``."""
    return t_margin(math.sqrt(variance * factor), df, level)


def order_factor(orders: npt.NDArray[np.int64]) -> float:
    """The speedup's variance over the noise variance for pairs of these orders."""
    opened = int((orders > 0).sum())
    return 0.25 * (1 / opened + 1 / (orders.size - opened)) if 0 < opened < orders.size else NAN


@dataclass(frozen=True)
class Estimate:
    """A job's speedup with its interval, the order effect (ratio scale: how much faster the
    variant looks when it runs second) with its own interval, and how both were computed."""

    speedup: Interval
    log_se: float
    df: int
    order_effect: float
    order_low: float
    order_high: float
    method: str


# The interval methods ``estimate`` names (a summary's ``interval_method``).
SECOND_STAGE = "second-stage crossover"
DECISION = SEQUENTIAL
PRECISION = ADJUSTED_SEQUENTIAL
CROSSOVER = "crossover"
PAIRED_T = "paired t"
ZERO_SPREAD = "zero spread"

# The lag-1 autocorrelations of pair residuals the interval allows for: beyond the most, a
# handful of pairs cannot tell a wandering speedup from a trend; below the least, the
# estimate is noise (a negative one shrinks the variance, as a positive one grows it, so
# that independent pairs keep their level on average).
LEAST_AUTOCORRELATION = -0.5
MOST_AUTOCORRELATION = 0.8


def autocorrelation_factor(values: npt.NDArray[np.float64],
                           orders: npt.NDArray[np.int64]) -> float:
    """How much a lag-1 autocorrelation of the pairs' crossover residuals (every pair, in
    order) scales the variance of their mean: (1 + r) / (1 - r), r the residuals' lag-1
    correlation plus 1 / pairs (its small-sample bias), clipped to
    [``LEAST_AUTOCORRELATION``, ``MOST_AUTOCORRELATION``]; 1 below 4 pairs."""
    if values.size < 4 or not ((orders > 0).any() and (orders < 0).any()):
        return 1.0
    residual = values.copy()
    for order in (1, -1):
        residual[orders == order] -= values[orders == order].mean()
    total = float(residual @ residual)
    r = float(residual[1:] @ residual[:-1]) / total if total > 0 else 0.0
    r = min(max(r + 1.0 / values.size, LEAST_AUTOCORRELATION), MOST_AUTOCORRELATION)
    return (1.0 + r) / (1.0 - r)


def estimate(values: LogRatios, orders: Orders,
             design: Design | None = None, level: float = 0.95) -> Estimate:
    """The job's speedup interval, as its design allows.

    * Two-stage job past its first stage (``SECOND_STAGE``): the crossover estimate and
      its noise variance from the second stage's pairs only (df = their number - 2). The
      number of pairs depends on the first stage alone, and the second stage's pairs are
      independent of it, so the interval covers at its level whatever the number of pairs,
      for the jobs that stop earliest too, and whatever the first stage's noise was (a
      noisy warm-up, or noise that doubles after it: docs/statistics.md). The variance is
      scaled by ``autocorrelation_factor`` over every pair, for a speedup that wanders.
    * Decision design (``DECISION``, farm.stats.sequential): the crossover estimate over
      every pair, its variance scaled by ``autocorrelation_factor``; at its stop the 95%
      interval covers 0.93-0.98 in every audit cell (docs/statistics.md).
    * Precision design without an assurance (``PRECISION``): the same, at
      ``PRECISION_LEVEL`` whatever ``level`` asks, the interval it stopped on, adjusted so
      that it covers 0.936-0.972 at the stop in every audit cell.
    * Fixed design, or a two-stage job cut short: the crossover interval over all pairs when
      there are 4 or more with both orders (``CROSSOVER``), else the paired t
      (``speedup_interval``, ``PAIRED_T``).
    * A spread of zero where the interval's variance comes from (identical pair values: a
      fault, such as a cached or rounded result, not certainty): the estimate without an
      interval (``ZERO_SPREAD``), never a zero-width one.
    """
    y, o, index = aligned_pairs(values, orders)
    second = index >= design.first_stage if design is not None else index < 0
    if design is not None and design.two_stage and int(second.sum()) >= MIN_SECOND_STAGE:
        fit = crossover(y[second], o[second])
        variance, method = fit.variance * autocorrelation_factor(y, o), SECOND_STAGE
    elif design is not None and design.sequential:
        fit = crossover(y, o)
        variance = fit.variance * autocorrelation_factor(y, o)
        if design.rule == "precision":  # the level it stopped on (farm.stats.sequential)
            level, method = PRECISION_LEVEL, PRECISION
        else:
            method = DECISION
    else:
        fit = crossover(y, o)
        variance, method = fit.variance, CROSSOVER
    # Too few pairs for the model (or a second stage without both orders): the paired t.
    if not (fit.df >= 2 and math.isfinite(variance)):
        paired = speedup_interval(y, level)
        se = float(y.std(ddof=1)) / math.sqrt(y.size) if y.size >= 2 else NAN
        if se == 0.0:
            return Estimate(Interval(paired.estimate, NAN, NAN, paired.pairs), NAN,
                            y.size - 1, NAN, NAN, NAN, ZERO_SPREAD)
        return Estimate(paired, se, max(y.size - 1, 0), NAN, NAN, NAN, PAIRED_T)
    point = math.exp(fit.log_speedup)
    if variance == 0.0:
        return Estimate(Interval(point, NAN, NAN, int(y.size)), NAN, fit.df,
                        math.exp(fit.order_effect), NAN, NAN, ZERO_SPREAD)
    margin = crossover_margin(variance, fit.factor, fit.df, level)
    interval = Interval(point, math.exp(fit.log_speedup - margin),
                        math.exp(fit.log_speedup + margin), int(y.size))
    # The variant runs second in AB pairs: the order effect is how much better the second
    # block of a pair does than the first (1.0: none).
    order = fit.order_effect
    return Estimate(interval, math.sqrt(variance * fit.factor), fit.df, math.exp(order),
                    math.exp(order - margin), math.exp(order + margin), method)


def job_estimate(runs: pd.DataFrame, design: Design | None) -> Estimate:
    """The one place a job's interval is made from its runs: ``estimate`` on its pair
    values and orders with the job's ``design`` (None: a fixed design). The summary, the
    per-category rows, recommend's check and the streams' aggregate speedup call it."""
    return estimate(pair_log_ratios(runs), pair_orders(runs), design)


def job_speedup(runs: pd.DataFrame, design: Design | None) -> Interval:
    """The job's speedup (variant over baseline decode tok/s) with its 95% interval, made
    with its design (``job_estimate``)."""
    return job_estimate(runs, design).speedup


def speedup_by(runs: pd.DataFrame, column: str, design: Design | None) -> pd.DataFrame:
    """The job's speedup per prompt or prompt category, each from its own prompts' pairs
    with the job's ``design`` (``job_estimate``: a two-stage job's rows are two-stage too).

    ``column`` is "prompt_id" or "prompt_category"; one row per group value with columns
    ``column``, estimate, low, high, pairs, and the log standard error and df that
    ``pool_jobs`` combines.
    """
    if column not in ("prompt_id", "prompt_category"):
        raise ValueError(f"speedup_by groups by prompt_id or prompt_category, not {column!r}")
    rows = []
    for value, group in runs.groupby(column, sort=True):
        found = job_estimate(group, design)
        rows.append({column: value, "estimate": found.speedup.estimate,
                     "low": found.speedup.low, "high": found.speedup.high,
                     "pairs": found.speedup.pairs, "log_se": found.log_se, "df": found.df})
    return pd.DataFrame(rows, columns=[column, "estimate", "low", "high", "pairs", "log_se",
                                       "df"])
