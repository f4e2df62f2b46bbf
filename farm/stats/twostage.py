"""The two-stage rule: the first stage's spread plans how many pairs a job runs."""

from __future__ import annotations

import math

import numpy as np

from farm.stats.design import MIN_SECOND_STAGE, Design, StopDecision
from farm.stats.distributions import f_cdf
from farm.stats.frame import LogRatios, Orders
from farm.stats.speedup import aligned_pairs, crossover, crossover_margin, order_factor


def planned_pairs(values: LogRatios, orders: Orders,
                  design: Design, level: float = 0.95) -> int:
    """How many pairs the job runs in all, fixed by its first stage alone.

    The first stage's crossover spread (df first_stage - 2) predicts the half-width at each
    total; the plan is the smallest total whose predicted half-width, with the second
    stage's own t quantile and over the second stage's pairs (those the estimate uses:
    ``farm.stats.speedup.estimate``), is within the target. With an ``assurance`` p, the half-width
    is the second stage's, whose spread is not known yet: the ratio of its variance to the
    first stage's follows F(second df, first df) (normal pairs, one noise level), so the
    plan is the smallest total that meets the target with probability p or more. A first
    stage that is incomplete, or whose pairs are identical (a fault, not certainty), plans
    the maximum.
    """
    if not design.two_stage:
        return design.max_pairs
    y, o, index = aligned_pairs(values, orders)
    first_stage = index < design.first_stage
    first = crossover(y[first_stage], o[first_stage])
    if int(first_stage.sum()) < design.first_stage or not first.variance > 0:
        return design.max_pairs
    # The orders of later pairs keep alternating as the first stage's did.
    pattern = np.resize(o[:2], design.max_pairs)
    limit = math.asinh(design.target)
    for total in range(design.first_stage + MIN_SECOND_STAGE, design.max_pairs + 1):
        second = total - design.first_stage - 2
        margin = crossover_margin(first.variance,
                                  order_factor(pattern[design.first_stage:total]), second, level)
        # With an assurance: the probability that the second stage's variance over the
        # first's stays below (limit / margin)^2, the ratio at which it meets the target.
        if (margin <= limit if design.assurance is None
                else f_cdf((limit / margin) ** 2, second, first.df) >= design.assurance):
            return total
    return design.max_pairs


def stop_decision(values: LogRatios, orders: Orders,
                  design: Design, pairs_done: int) -> StopDecision:
    """After each complete pair: go on until the first stage is done, then until the number
    of pairs it planned (``planned_pairs``)."""
    if pairs_done >= design.max_pairs:
        return StopDecision(True, f"max pairs ({design.max_pairs}) reached")
    if pairs_done < design.first_stage:
        return StopDecision(False, f"first stage: {pairs_done} of {design.first_stage} pairs")
    plan = planned_pairs(values, orders, design)
    if pairs_done >= plan:
        return StopDecision(True, f"planned pairs ({plan}) reached")
    return StopDecision(False, f"planned {plan} pairs from the first stage")
