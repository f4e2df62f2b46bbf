"""The race `farm tune` runs: which of many speculative settings is fastest, found with
simultaneous intervals in a fraction of a full grid's pairs (docs/tune.md).

Every candidate is a job against the same baseline arm; its evidence is its block pairs
(log speedups and orders), fitted with the crossover model a job's interval uses
(``farm.stats.speedup.crossover``, its variance scaled by the autocorrelation factor).
The candidates run on one machine, so each candidate's few-pair variance is shrunk toward
the pooled one (``farm.stats.pooling.shrunk_variances``), its df the own df plus the
prior's (the mean df).

The method is successive elimination with LUCB's stopping rule on simultaneous bounds: at
every look each candidate's deficit to the leader (the survivor that looks fastest), a log
ratio with the two candidates' variances summed, gets a t interval at level
1 - (1 - LOOK_LEVEL) / (candidates - 1): Bonferroni over the candidates, so that at each
look the deficits hold together at ``LOOK_LEVEL``. Over the looks the level is one constant
(Pocock's shape of boundary, as the decision design's looks: farm.stats.sequential), set by
simulation so that the setting named is within epsilon of the true best at least 0.95 of
the time in every audit cell (tests/bench/bench_race.py, docs/tune.md); a Bonferroni split
over the looks too held 0.99-1.00 there at more pairs than measuring every candidate. While
the bounds hold the fastest candidate is never dropped, and the race names a setting
within epsilon of it:

* a candidate whose deficit interval lies wholly below -epsilon is dropped;
* the race stops when one candidate is left, or when no survivor's interval leaves room for
  it to be more than epsilon faster than the leader (the leader is within epsilon of the
  best; when every survivor is also shown within epsilon of the leader, any is a fair
  choice), or when the next round would pass the budget (named as such: no guarantee);
* else every survivor not yet settled, and the leader, run ``round_pairs`` more pairs.

``look`` is one look; ``race`` runs the rounds through a ``measure`` callback (the
simulation's pairs, or `farm tune`'s jobs).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from farm.stats.frame import NAN, Floats
from farm.stats.intervals import Interval, best_of_interval, t_margin
from farm.stats.pooling import shrunk_variances
from farm.stats.speedup import aligned_pairs, autocorrelation_factor, crossover

# The margin within which any setting is a fair choice (a ratio: 2%).
EPSILON = 0.02
# Pairs every candidate opens with (both orders twice: the crossover fit's df of 2), and
# pairs each survivor adds per later round (one of each order).
FIRST_ROUND = 4
ROUND_PAIRS = 2
# The most pairs one candidate runs; each look's level over the candidates' deficits.
MAX_PAIRS = 24
LOOK_LEVEL = 0.8

# Why a race stopped: one candidate left; the leader within epsilon of the best; also every
# survivor within epsilon of the leader (any is a fair choice); the budget.
StopReason = Literal["one-left", "leader-within", "fair-choice", "budget"]


@dataclass(frozen=True)
class RacePlan:
    """A race over ``candidates`` settings: ``epsilon`` the fair margin (a ratio), pairs per
    round, the most pairs a candidate runs, ``budget`` the most pairs in all (None: as many
    as every candidate at ``max_pairs``) and ``look_level`` each look's simultaneous level
    over the deficits."""

    candidates: int
    epsilon: float = EPSILON
    first_round: int = FIRST_ROUND
    round_pairs: int = ROUND_PAIRS
    max_pairs: int = MAX_PAIRS
    budget: int | None = None
    look_level: float = LOOK_LEVEL

    def __post_init__(self) -> None:
        if self.candidates < 1:
            raise ValueError("a race needs one candidate or more")
        if not 0.0 < self.epsilon < 1.0:
            raise ValueError(f"epsilon must be in (0, 1), got {self.epsilon}")
        if self.first_round < FIRST_ROUND or self.round_pairs < 2 or self.round_pairs % 2:
            raise ValueError("a race opens with 4 pairs or more and adds an even number")
        if self.max_pairs < self.first_round:
            raise ValueError(f"max pairs ({self.max_pairs}) below the first round "
                             f"({self.first_round})")
        if self.budget is not None and self.budget < self.first_round_pairs:
            raise ValueError(f"a budget of {self.budget} pairs is smaller than one round "
                             f"({self.first_round_pairs} pairs: {self.candidates} candidates x "
                             f"{self.first_round})")

    @property
    def first_round_pairs(self) -> int:
        """The pairs the first round runs in all."""
        return self.candidates * self.first_round

    @property
    def comparisons(self) -> int:
        """The intervals a look's Bonferroni split covers: every survivor's deficit."""
        return max(self.candidates - 1, 1)

    @property
    def most_pairs(self) -> int:
        """The budget, or every candidate at its most pairs."""
        return self.budget if self.budget is not None else self.candidates * self.max_pairs


@dataclass(frozen=True)
class Evidence:
    """One candidate's pairs so far: log speedups against the baseline and orders."""

    values: Floats
    orders: np.ndarray


@dataclass(frozen=True)
class Standing:
    """A survivor at a look: its speedup against the baseline (95% interval), and its
    ratio to the leader with the race's simultaneous interval (1 for the leader)."""

    candidate: int
    pairs: int
    speedup: Interval
    deficit: float
    deficit_low: float
    deficit_high: float


@dataclass(frozen=True)
class Drop:
    """A candidate dropped: at which look, after how many pairs in all, and the deficit
    to the leader (with interval) that dropped it."""

    standing: Standing
    look: int
    spent: int
    leader: int


@dataclass(frozen=True)
class Look:
    """What one look found: the survivors' standings (leader first), who drops, whether the
    race stops and why, and each survivor's pairs after the next round."""

    standings: tuple[Standing, ...]
    dropped: tuple[Standing, ...]
    stop: StopReason | None
    wanted: Mapping[int, int]

    @property
    def leader(self) -> Standing:
        """The survivor that looks fastest."""
        return self.standings[0]


@dataclass(frozen=True)
class _Fit:
    """A candidate's crossover fit: log speedup, noise variance (times the autocorrelation
    factor), the speedup's variance over it, df, and the pairs it was fitted on (all its
    values, finite or not)."""

    log_speedup: float
    noise: float
    factor: float
    df: int
    pairs: int


def _fit(evidence: Evidence) -> _Fit:
    y, o, _ = aligned_pairs(evidence.values, evidence.orders)
    found = crossover(y, o)
    size = int(np.asarray(evidence.values).size)
    if found.df < 1 or not math.isfinite(found.variance):
        return _Fit(float(np.mean(y)) if y.size else NAN, NAN, NAN, 0, size)
    return _Fit(found.log_speedup, found.variance * autocorrelation_factor(y, o),
                found.factor, found.df, size)


def _standing(candidate: int, fit: _Fit, leader: _Fit | None, variances: tuple[float, float],
              df: float, plan: RacePlan) -> Standing:
    """A survivor's standing; ``leader`` None for the leader itself (``variances``: the
    candidate's shrunk noise variance and the leader's)."""
    low, high = best_of_interval(fit.log_speedup, math.sqrt(variances[0] * fit.factor),
                                 int(df), plan.candidates)
    speedup = Interval(math.exp(fit.log_speedup), low, high, fit.pairs)
    if leader is None:
        return Standing(candidate, fit.pairs, speedup, 1.0, 1.0, 1.0)
    gap = fit.log_speedup - leader.log_speedup
    se = math.sqrt(variances[0] * fit.factor + variances[1] * leader.factor)
    margin = t_margin(se, df, plan.look_level, plan.comparisons)
    return Standing(candidate, fit.pairs, speedup, math.exp(gap), math.exp(gap - margin),
                    math.exp(gap + margin))


def look(evidence: Mapping[int, Evidence], plan: RacePlan, spent: int,
         fitted: dict[int, _Fit] | None = None) -> Look:
    """One look at the survivors' ``evidence`` (``spent`` pairs run in all so far);
    ``fitted``: fits of earlier looks, kept for candidates whose pairs have not changed
    (and updated)."""
    fitted = {} if fitted is None else fitted
    keys = sorted(evidence)
    for key in keys:
        if key not in fitted or fitted[key].pairs != evidence[key].values.size:
            fitted[key] = _fit(evidence[key])
    fits = [fitted[k] for k in keys]
    if any(f.df < 1 for f in fits):
        raise ValueError("every survivor needs 3 pairs or more of both orders")
    noise = shrunk_variances(np.array([f.noise for f in fits]),
                             np.array([f.df for f in fits], dtype=float))
    dfs = np.array([f.df for f in fits], dtype=float) + float(np.mean([f.df for f in fits]))
    lead = int(np.argmax([f.log_speedup for f in fits]))
    standings = [_standing(keys[lead], fits[lead], None, (noise[lead], noise[lead]),
                           dfs[lead], plan)]
    standings += [_standing(key, fits[i], fits[lead], (noise[i], noise[lead]),
                            min(dfs[i], dfs[lead]), plan)
                  for i, key in enumerate(keys) if i != lead]
    floor, ceiling = 1.0 - plan.epsilon, 1.0 + plan.epsilon
    dropped = tuple(s for s in standings[1:] if s.deficit_high < floor)
    alive = [standings[0]] + [s for s in standings[1:] if s.deficit_high >= floor]
    open_ = [s for s in alive[1:] if s.deficit_high >= ceiling]
    stop = _stop(alive, open_, plan, spent)
    wanted = {} if stop else _wanted(alive, open_, plan)
    if not stop and spent + sum(wanted[s.candidate] - s.pairs for s in alive) > plan.most_pairs:
        stop, wanted = "budget", {}
    return Look(tuple(alive), dropped, stop, wanted)


def _stop(alive: list[Standing], open_: list[Standing], plan: RacePlan,
          spent: int) -> StopReason | None:
    if len(alive) == 1:
        return "one-left"
    if not open_:
        close = all(s.deficit_low > 1.0 - plan.epsilon for s in alive[1:])
        return "fair-choice" if close else "leader-within"
    if all(s.pairs >= plan.max_pairs for s in [alive[0], *open_]) or spent >= plan.most_pairs:
        return "budget"
    return None


def _wanted(alive: list[Standing], open_: list[Standing], plan: RacePlan) -> dict[int, int]:
    """The leader and every unsettled survivor run ``round_pairs`` more (up to max pairs);
    the settled ones stay as they are."""
    more = {s.candidate for s in open_} | {alive[0].candidate}
    return {s.candidate: min(s.pairs + plan.round_pairs, plan.max_pairs)
            if s.candidate in more else s.pairs for s in alive}


@dataclass(frozen=True)
class RaceResult:
    """A finished race: its last look (the leader is the answer), every drop in order, the
    pairs run in all and the looks taken."""

    final: Look
    drops: tuple[Drop, ...]
    spent: int
    looks: int

    @property
    def named(self) -> int:
        """The setting the race names."""
        return self.final.leader.candidate


# What a race asks to be run: each candidate's pairs in all after the round; answered with
# every asked candidate's evidence (all its pairs so far).
Measure = Callable[[Mapping[int, int]], Mapping[int, Evidence]]


def race(plan: RacePlan, measure: Measure,
         replan: Callable[[RacePlan, int], RacePlan] | None = None) -> RaceResult:
    """Run a race: the first round for every candidate, then a look after each round;
    ``replan`` (the plan, the pairs spent) may set the budget once the first round has run
    (a budget in minutes becomes pairs at the seconds a pair took)."""
    wanted: Mapping[int, int] = dict.fromkeys(range(plan.candidates), plan.first_round)
    evidence: dict[int, Evidence] = {}
    fitted: dict[int, _Fit] = {}
    drops: list[Drop] = []
    looks = spent = 0
    while True:
        evidence.update(measure(wanted))
        before, spent = spent, sum(int(np.isfinite(e.values).sum()) for e in evidence.values())
        if spent == before:
            raise ValueError("a round added no valid pairs")
        if replan is not None and looks == 0:
            plan = replan(plan, spent)
        looks += 1
        found = look({k: evidence[k] for k in wanted}, plan, spent, fitted)
        drops += [Drop(s, looks, spent, found.leader.candidate) for s in found.dropped]
        if found.stop is not None:
            return RaceResult(found, tuple(drops), spent, looks)
        wanted = found.wanted


# Every candidate measured to ±3% (a matrix's default precision design): its first stage
# and its most pairs.
GRID_TARGET, GRID_LEAST, GRID_MOST = 0.03, 4, 12


def grid_pairs(evidence: list[Evidence]) -> float:
    """About the pairs measuring every candidate to ±``GRID_TARGET`` would take: each
    candidate's pairs scaled by the square of its 95% half-width over the target (the
    half-width shrinks about as one over the root of the pairs), within the precision
    design's first stage and its most pairs."""
    total = 0.0
    for one in evidence:
        fit = _fit(one)
        if fit.df < 1 or not math.isfinite(fit.noise):
            total += GRID_MOST
            continue
        half = t_margin(math.sqrt(fit.noise * fit.factor), fit.df)
        need = fit.pairs * (half / math.log1p(GRID_TARGET)) ** 2
        total += min(max(need, GRID_LEAST), GRID_MOST)
    return total
