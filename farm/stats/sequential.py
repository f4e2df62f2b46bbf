"""The decision design: a job looks after each pair, from its first stage on, whether the
question "is the variant faster?" is answered, and stops when it is (docs/statistics.md,
"The decision design"; chosen by simulation, tests/unit/simulate_design.py).

Each look is a repeated confidence interval: the crossover fit over every pair so far, its
variance scaled by the autocorrelation factor (``estimate`` with a decision design), at
``LOOK_LEVEL``, one constant level at every look (Pocock's shape of boundary, its level
set by simulation: a direction said of no speedup stays under 5% over the nine looks of
4 to 12 pairs in every audit cell). A look answers as `farm ab` reads an interval
(``farm.stats.design.answer``): faster when the interval leaves 1x out above, slower below,
within ±target when it lies inside that. A job stops at the first look that answers, or
undecided when more pairs would not decide it (futility: the interval projected to max
pairs around today's estimate, its half-width times ``FUTILITY``, would answer nothing), or
at max pairs. The interval a report shows is the usual 95% one over the pairs run, which
covers 0.93-0.98 at the stop in every cell; the answer is the look's, not that interval's.

The precision design looks the same way, from its first stage (4 pairs at least), for an
interval within its target: it stops at the first look whose interval over every pair (the
same fit, at ``PRECISION_LEVEL``) is within ±target, or at max pairs. Stopping when an
interval is narrow picks the jobs whose spread came out small, so a 95% interval at the stop
would undercover (0.90 where the noise doubles); the interval such a job reports is the one
it stopped on, at ``PRECISION_LEVEL``, chosen by simulation so that it covers 0.936-0.972
at the stop in every audit cell (an adjusted interval, not a repeated one: tests/unit/
simulate_design.py, docs/statistics.md "The precision design").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from farm.stats.design import Answer, Design, StopDecision, answer
from farm.stats.frame import LogRatios, Orders
from farm.stats.intervals import t_margin
from farm.stats.speedup import aligned_pairs, estimate, order_factor
from farm.words import NOT_REACHABLE

# Each look's interval level: 1% at each of up to nine looks.
LOOK_LEVEL = 0.99
# A job stops undecided when its interval projected to max pairs, at this share of its
# half-width (an optimistic projection: the spread may fall), would still answer nothing.
FUTILITY = 0.6


@dataclass(frozen=True)
class Look:
    """What a look at ``pairs`` pairs found: its ``said`` answer, and whether the job stops
    there (``final``: an answer, or undecided for good)."""

    said: Answer
    pairs: int
    final: bool

    def reason(self, design: Design) -> str:
        """The job's stop reason, as reports and `farm ab` show it."""
        most = f"of at most {design.max_pairs} pairs"
        if self.said == "undecided":
            if not self.final:
                return f"undecided after {self.pairs} {most}: looking on"
            if self.pairs >= design.max_pairs:
                return f"undecided at max pairs ({design.max_pairs})"
            return f"undecided after {self.pairs} {most}: more pairs would not decide it"
        what = f"within ±{design.target * 100:g}%" if self.said == "within" else self.said
        return f"{what} (decided after {self.pairs} {most})"


def look(values: LogRatios, orders: Orders, design: Design, pairs: int) -> Look:
    """The look after ``pairs`` pairs, on the complete ones among them."""
    y, o, index = aligned_pairs(values, orders)
    y, o = y[index < pairs], o[index < pairs]
    found = estimate(y, o, design, LOOK_LEVEL)
    said = answer(found.speedup.low, found.speedup.high, design.target)
    if said != "undecided" or pairs >= design.max_pairs:
        return Look(said, pairs, True)
    return Look(said, pairs, _futile(found.speedup.estimate, found.log_se, o, design))


def _futile(speedup: float, log_se: float, orders: np.ndarray, design: Design) -> bool:
    """Whether the interval at max pairs (the orders alternating on, the spread as now),
    around ``speedup``, at ``FUTILITY`` of its half-width, would answer nothing."""
    if not (math.isfinite(log_se) and log_se > 0 and orders.size > 0):
        return False
    later = np.resize([orders[-1] * -1, orders[-1]], design.max_pairs - orders.size)
    projected = log_se * math.sqrt(order_factor(np.concatenate([orders, later]))
                                   / order_factor(orders))
    margin = FUTILITY * t_margin(projected, design.max_pairs - 2, LOOK_LEVEL)
    center = math.log(speedup)
    return answer(math.exp(center - margin), math.exp(center + margin),
                  design.target) == "undecided"


def decided(values: LogRatios, orders: Orders, design: Design) -> Look:
    """The job's answer: its first final look, from the first stage to the pairs it has
    (the executor stopped there); a job still running has its last look's."""
    _, _, index = aligned_pairs(values, orders)
    done = int(index.max()) + 1 if index.size else 0
    found = Look("undecided", done, False)
    for pairs in range(design.first_stage, min(done, design.max_pairs) + 1):
        found = look(values, orders, design, pairs)
        if found.final:
            break
    return found


def decision_stop(values: LogRatios, orders: Orders, design: Design,
                  pairs_done: int) -> StopDecision:
    """After each complete pair: the first stage, then a look after every pair."""
    if pairs_done < design.first_stage:
        return StopDecision(False, f"first stage: {pairs_done} of {design.first_stage} pairs",
                            (design.first_stage, design.max_pairs))
    found = look(values, orders, design, pairs_done)
    most = (pairs_done, pairs_done) if found.final else (pairs_done + 1, design.max_pairs)
    return StopDecision(found.final, found.reason(design), most)


def precision_stop(values: LogRatios, orders: Orders, design: Design,
                   pairs_done: int) -> StopDecision:
    """After each complete pair: the first stage (4 pairs at least), then a look after every
    pair until the interval over every pair, at ``PRECISION_LEVEL``, is within the target."""
    if pairs_done < design.least_pairs:
        return StopDecision(False, f"first stage: {pairs_done} of {design.least_pairs} pairs",
                            (design.least_pairs, design.max_pairs))
    half_width = estimate(values, orders, design).speedup.half_width
    done = (pairs_done, pairs_done)
    if half_width <= design.target:
        return StopDecision(True, f"target met at {pairs_done} of at most {design.max_pairs} "
                                  f"pairs (±{half_width:.1%})", done)
    if pairs_done >= design.max_pairs:
        return StopDecision(True, f"{NOT_REACHABLE}: half-width {half_width:.1%} at max pairs "
                                  f"({design.max_pairs})", done)
    return StopDecision(False, f"half-width {half_width:.1%} over the target "
                               f"{design.target:.1%}: looking on",
                        (pairs_done + 1, design.max_pairs))


def precise(values: LogRatios, orders: Orders, design: Design) -> int:
    """The pairs a precision job stops at: its first look within the target, from the first
    stage to the pairs it has (the executor stopped there)."""
    y, o, index = aligned_pairs(values, orders)
    done = min(int(index.max()) + 1 if index.size else 0, design.max_pairs)
    for pairs in range(design.least_pairs, done + 1):
        if precision_stop(y[index < pairs], o[index < pairs], design, pairs).stop:
            return pairs
    return done
