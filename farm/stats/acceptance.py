"""How much of a variant's drafting was accepted, with prompts as clusters."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pandas as pd

from farm.stats.frame import NAN, LogRatios, ratio
from farm.stats.intervals import t_margin


def _clusters(numerators: LogRatios, denominators: LogRatios
              ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The clusters (prompts) with a finite numerator and a positive denominator."""
    a = np.asarray(numerators, dtype=float)
    d = np.asarray(denominators, dtype=float)
    used = np.isfinite(a) & np.isfinite(d) & (d > 0)
    return a[used], d[used]


def cluster_ratio(numerators: LogRatios, denominators: LogRatios) -> tuple[float, float, int]:
    """sum(numerators) / sum(denominators) over the clusters (prompts) with a positive
    denominator, its standard error with clusters as the unit (the ratio estimator's
    linearisation) and its df (clusters - 1): rate, NaN, 0 below two clusters, NaN, NaN, 0
    without any."""
    return _ratio(*_clusters(numerators, denominators))


def _ratio(a: npt.NDArray[np.float64], d: npt.NDArray[np.float64]
           ) -> tuple[float, float, int]:
    """``cluster_ratio`` of the clusters kept."""
    clusters = int(a.size)
    if clusters == 0:
        return NAN, NAN, 0
    rate = float(a.sum() / d.sum())
    if clusters < 2:
        return rate, NAN, 0
    spread = float(np.sum((a - rate * d) ** 2))
    se = math.sqrt(clusters / (clusters - 1) * spread) / float(d.sum())
    return rate, se, clusters - 1


@dataclass(frozen=True)
class Acceptance:
    """The variant's draft counters and the rates derived from them; ``rate_low`` and
    ``rate_high`` bound the acceptance rate (95%, prompts as clusters)."""

    drafts: int
    drafted: int
    accepted: int
    rate: float
    rate_low: float
    rate_high: float
    mean_accepted_length: float
    per_position: list[float]


def _summed_positions(values: pd.Series) -> list[int]:
    totals: list[int] = []
    for counts in values:
        # None / NaN: a run without per-position counters adds nothing.
        if not isinstance(counts, list | tuple | np.ndarray):
            continue
        totals.extend([0] * (len(counts) - len(totals)))
        for position, count in enumerate(counts):
            totals[position] += int(count)
    return totals


def _expit(x: float) -> float:
    """1 / (1 + exp(-x)) without overflow."""
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    return math.exp(x) / (1.0 + math.exp(x))


def _skew_corrected(quantile: float, skewness: float, clusters: int) -> float:
    """Where Hall's (1992) transformation g(T) = T + a T^2 + a^2 T^3 / 3 + a / 2, with
    a = skewness / (3 sqrt(clusters)), takes ``quantile``: g^-1 of it, the quantile of the
    studentised estimate itself when its clusters' residuals have this skewness. Written
    as 3 y / (c^2 + c + 1), c = cbrt(1 + 3 a y), y = quantile - a / 2, so that it
    stays exact as a goes to 0 (no skewness: the quantile unchanged)."""
    a = skewness / (3.0 * math.sqrt(clusters))
    y = quantile - a / 2.0
    c = math.cbrt(1.0 + 3.0 * a * y)
    return 3.0 * y / (c * c + c + 1.0)


def rate_interval(accepted: LogRatios, drafted: LogRatios,
                  level: float = 0.95) -> tuple[float, float]:
    """An interval for sum(accepted) / sum(drafted) that treats each entry (a prompt, its
    runs summed: ``acceptance``) as a cluster.

    Drafts within one text are not independent trials: a binomial interval over drafts is
    far too narrow, and so is one over runs that repeat a prompt's text. The standard error
    is the ratio estimator's cluster-robust linearisation (``cluster_ratio``), carried to
    the logit scale, where the interval is made and then mapped back, so it stays inside
    [0, 1] and is shorter towards the nearer bound. Its t quantile on clusters - 1 df goes
    through Hall's (1992) skewness-removing transformation with the skewness of the
    prompts' residuals (accepted - rate x drafted): prompts that accept little draft more,
    weigh more and are rare, so the prompts' totals are skewed, and a symmetric interval
    lies too often wholly above the population's rate (issue 38; tests/bench/
    bench_acceptance.py). Fewer than two clusters with drafts: NaN; prompts that all
    accept the same share (0 and 1 included): that share, a zero-width interval.
    """
    a, d = _clusters(accepted, drafted)
    rate, se, df = _ratio(a, d)
    if df < 1:
        return NAN, NAN
    if se == 0 or not 0 < rate < 1:
        clipped = min(max(rate, 0.0), 1.0)
        return clipped, clipped
    residuals = a - rate * d
    skewness = float(np.mean(residuals**3) / np.mean(residuals**2) ** 1.5)
    quantile = t_margin(1.0, df, level)
    logit, logit_se = math.log(rate / (1.0 - rate)), se / (rate * (1.0 - rate))
    return (_expit(logit - logit_se * _skew_corrected(quantile, skewness, a.size)),
            _expit(logit - logit_se * _skew_corrected(-quantile, skewness, a.size)))


def acceptance(runs: pd.DataFrame) -> Acceptance:
    """The variant's acceptance from its raw counters.

    ``rate`` is accepted / drafted (llama.cpp's), with ``rate_interval`` over the variant's
    prompts (each prompt's runs summed: the interval is for the population of prompts these
    were drawn from, and repetitions of a prompt at temperature 0 are the same text, so
    they count once, not as independent clusters); ``mean_accepted_length`` is
    (accepted + drafts) / drafts, vLLM's acceptance length, which counts the bonus token
    each verify step yields; ``per_position[i]`` is accepted at draft position i per
    draft. No drafts gives NaN, not zero: nothing was measured.
    """
    variant = runs[runs["arm"] == "variant"]
    drafts, drafted, accepted = (int(variant[column].fillna(0).sum())
                                 for column in ("spec_drafts", "spec_drafted", "spec_accepted"))
    # A prompt's runs summed: at temperature 0 its repetitions draft the same text.
    by_prompt = variant.groupby("prompt_id")[["spec_accepted", "spec_drafted"]].sum(min_count=1)
    low, high = rate_interval(by_prompt["spec_accepted"].astype(float),
                              by_prompt["spec_drafted"].astype(float))
    # Per position: over the drafts of runs that have the counters (older builds lack them).
    counted = variant["spec_accepted_per_pos"].map(
        lambda counts: isinstance(counts, list | tuple | np.ndarray) and len(counts) > 0)
    counted_drafts = int(variant.loc[counted, "spec_drafts"].fillna(0).sum())
    per_position = [ratio(count, counted_drafts)
                    for count in _summed_positions(variant["spec_accepted_per_pos"])]
    return Acceptance(drafts, drafted, accepted, ratio(accepted, drafted), low, high,
                      ratio(accepted + drafts, drafts), per_position)
