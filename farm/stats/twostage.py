"""The two-stage rule: the first stage's spread plans how many pairs a job runs; with an
assurance, the second stage's own spread runs it on past the plan until it meets its target."""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from farm.stats.design import MIN_SECOND_STAGE, Design, StopDecision
from farm.stats.distributions import f_cdf
from farm.stats.frame import Floats, LogRatios, Orders
from farm.stats.speedup import aligned_pairs, crossover, crossover_margin, estimate, order_factor
from farm.words import NOT_REACHABLE

# The interval's ``autocorrelation_factor`` with independent pairs: its log is about normal
# with mean 2 / pairs and variance 4 / pairs (measured at 16-100 pairs; at 8 its mean is 1.55,
# not exp(4 / 8) = 1.65), so its mean is about exp(4 / pairs) (1.09 at 48); averaged over it
# with 9 Gauss-Hermite nodes.
_NODES, _WEIGHTS = np.polynomial.hermite_e.hermegauss(9)
_WEIGHTS = _WEIGHTS / _WEIGHTS.sum()


def planned_pairs(values: LogRatios, orders: Orders,
                  design: Design, level: float = 0.95) -> int:
    """How many pairs the job runs in all, fixed by its first stage alone (with an
    ``assurance``, the fewest: ``stop_decision``).

    The first stage's crossover spread (df first_stage - 2) predicts the half-width at each
    total; the plan is the smallest total whose predicted half-width, with the second
    stage's own t quantile, over the second stage's pairs and with the autocorrelation
    factor over every pair (as ``farm.stats.speedup.estimate`` makes the interval; the
    factor's mean with independent pairs), is within the target. With an ``assurance`` p,
    the half-width is the second stage's, whose spread is not known yet: the ratio of its
    variance to the first stage's follows F(second df, first df) (normal pairs, one noise
    level), times the factor (lognormal, as with independent pairs), so the plan is the
    smallest total that meets the target with probability p or more. A first stage that is
    incomplete, or whose pairs are identical (a fault, not certainty), plans the maximum.
    """
    if not design.two_stage:
        return design.max_pairs
    y, o, index = aligned_pairs(values, orders)
    first_stage = index < design.first_stage
    first = crossover(y[first_stage], o[first_stage])
    if int(first_stage.sum()) < design.first_stage or not first.variance > 0:
        return design.max_pairs
    return _plan(first.variance, first.df, int(o[0]), design, level)


@lru_cache(maxsize=1024)
def _plan(variance: float, df: int, opens: int, design: Design, level: float) -> int:
    # Cached: stop_decision asks again after every pair with the same first stage.
    # The orders of later pairs keep alternating as the first stage's did.
    pattern = np.resize([opens, -opens], design.max_pairs)
    limit = math.asinh(design.target)
    for total in range(design.first_stage + MIN_SECOND_STAGE, design.max_pairs + 1):
        second = total - design.first_stage - 2
        margin = crossover_margin(variance, order_factor(pattern[design.first_stage:total]),
                                  second, level)
        if design.assurance is None:
            if margin * math.exp(2.0 / total) <= limit:
                return total
            continue
        # The probability that the second stage's variance over the first's, times the
        # factor, stays below (limit / margin)^2, the ratio at which it meets the target.
        factors = np.exp(2.0 / total + 2.0 / math.sqrt(total) * _NODES)
        if _meets((limit / margin) ** 2, factors, second, df, design.assurance):
            return total
    return design.max_pairs


# The nodes by weight, heaviest first: the order ``_meets`` computes its terms in.
_HEAVIEST = [int(node) for node in np.argsort(-_WEIGHTS, kind="stable")]
# How far from the assurance bounds on the sum decide without its last terms: far beyond
# the sum's rounding.
_DECIDED = 1e-9


def _meets(ratio: float, factors: Floats, second: int, df: int, assurance: float) -> bool:
    """Whether sum(weight * f_cdf(ratio / factor, second, df)) over the nodes, in their
    order, reaches ``assurance``: the terms made heaviest first, each in [0, weight], and
    none more once those made settle the answer (most totals before the plan miss it by
    far), so the answer is the whole sum's."""
    terms: dict[int, float] = {}
    rest = 1.0  # the weight of the terms not made yet
    for node in _HEAVIEST:
        weight = _WEIGHTS[node]
        terms[node] = weight * f_cdf(ratio / factors[node], second, df)
        rest -= weight
        made = sum(terms.values())
        if made + rest < assurance - _DECIDED or made > assurance + _DECIDED:
            return bool(made > assurance)
    return bool(sum(terms[node] for node in range(len(_NODES))) >= assurance)


def stop_decision(values: LogRatios, orders: Orders,
                  design: Design, pairs_done: int) -> StopDecision:
    """After each complete pair: go on until the first stage is done, then until the number
    of pairs it planned (``planned_pairs``).

    With an ``assurance``, the plan is the fewest pairs: from it on, the job stops once its
    interval (``estimate``, the second stage's spread re-estimated after each pair) meets
    the target, else runs on (a fixed-width sequential rule from the plan on, after Chow &
    Robbins 1965), so a second stage noisier than the first does not end short of the
    target. Without one, the plan meets the target about half the time, and running on
    only the jobs that miss it would stop the others on a second stage quiet by chance,
    whose intervals undercover (0.79 at 8 pairs of 4/12/±3%): such a job stops at its plan.
    At max pairs, an assured job whose interval is still wider than its target says so
    (``NOT_REACHABLE`` and the half-width); its interval is made and covers as any other.
    (A job without an assurance promises no target: a quarter to two thirds of the default
    design's miss its ±3%, and the report's interval column says by how much.)
    """
    done = (pairs_done, pairs_done)
    if pairs_done >= design.max_pairs:
        if design.two_stage and design.assurance is not None:
            half_width = estimate(values, orders, design).speedup.half_width
            if half_width > design.target:
                return StopDecision(True, f"{NOT_REACHABLE}: half-width {half_width:.1%} "
                                          f"at max pairs ({design.max_pairs})", done)
        return StopDecision(True, f"max pairs ({design.max_pairs}) reached", done)
    if pairs_done < design.first_stage:
        return StopDecision(False, f"first stage: {pairs_done} of {design.first_stage} pairs",
                            (design.least_pairs, design.max_pairs))
    plan = planned_pairs(values, orders, design)
    # With an assurance the plan is the fewest pairs: the job may run on to max pairs.
    most = plan if design.assurance is None else design.max_pairs
    if pairs_done < plan:
        return StopDecision(False, f"planned {plan} pairs from the first stage", (plan, most))
    if design.assurance is None:
        return StopDecision(True, f"planned pairs ({plan}) reached", done)
    half_width = estimate(values, orders, design).speedup.half_width
    if half_width <= design.target:
        return StopDecision(True, f"planned pairs ({plan}) reached" if pairs_done == plan
                            else f"target met at {pairs_done} pairs (planned {plan})", done)
    return StopDecision(False, f"half-width {half_width:.1%} over the target "
                               f"{design.target:.1%}: running on past the {plan} planned",
                        (pairs_done + 1, design.max_pairs))
