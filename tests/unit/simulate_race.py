"""Fixed-seed races (`farm tune`'s, farm.stats.race) over the audit's noise cells
(``simulate_design.DESIGN_CELLS``): how often the setting a race names is within epsilon of
the true best, and the pairs it spends against measuring every candidate to ±3% with the
precision design (a matrix's default, ``simulate_design.PRECISION``) on the same pairs.

A cell is a number of candidates, how far the best is ahead of the runner-up, and a noise
kind. The best's true speedup is 1.3x, the runner-up's 1.3 / (1 + gap), the others spread
evenly from the runner-up down to 20% below the best, in a random order; every candidate's
pairs are an audit job's (``simulate.job_effects``: its own block noise, SD 1-5%).
tests/bench/bench_race.py prints every cell at 2,000 races; tests/unit/test_race.py checks
a few cells with fewer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from farm.stats.race import Evidence, RacePlan, race
from farm.stats.sequential import precise
from tests.unit.simulate import job_effects
from tests.unit.simulate_design import PRECISION

CANDIDATES = (6, 12, 24)
GAPS = (0.0, 0.02, 0.05, 0.10)
BEST = 1.3
SPREAD = 0.8
GRID_RACES = 500


def true_speedups(candidates: int, gap: float) -> np.ndarray:
    """The candidates' true speedups, best first (the race sees them shuffled)."""
    runner_up = BEST / (1 + gap)
    rest = np.linspace(runner_up, BEST * SPREAD, candidates - 1)
    return np.concatenate([[BEST], rest])


@dataclass(frozen=True)
class RaceCell:
    """A cell's figures: races run, the share whose named setting is within epsilon of the
    best, mean pairs the race spent, mean pairs the grid spent, the races' stop reasons."""

    races: int
    within: float
    race_pairs: float
    grid_pairs: float
    reasons: Mapping[str, float]

    @property
    def share(self) -> float:
        """The race's pairs over the grid's."""
        return self.race_pairs / self.grid_pairs


def race_cell(kind: str, candidates: int, gap: float, races: int, seed: int,
              plan: RacePlan | None = None) -> RaceCell:
    """``races`` races of one cell, seeded."""
    plan = plan or RacePlan(candidates)
    rng = np.random.default_rng(seed)
    truth = true_speedups(candidates, gap)
    depth = max(plan.max_pairs, PRECISION.max_pairs)
    within = np.zeros(races, dtype=bool)
    spent = np.zeros(races)
    grid = np.zeros(min(races, GRID_RACES))
    reasons: dict[str, int] = {}
    for r in range(races):
        order = rng.permutation(candidates)
        jobs = [job_effects(rng, kind, depth, plan.first_round, math.log(truth[i]))
                for i in order]
        pairs = [Evidence(values, orders) for values, orders, _ in jobs]

        def measure(wanted: Mapping[int, int], pairs: list[Evidence] = pairs
                    ) -> dict[int, Evidence]:
            return {k: Evidence(pairs[k].values[:n], pairs[k].orders[:n])
                    for k, n in wanted.items()}

        result = race(plan, measure)
        named = truth[order[result.named]]
        within[r] = named >= BEST * (1 - plan.epsilon)
        spent[r] = result.spent
        if r < grid.size:
            grid[r] = sum(precise(e.values[:PRECISION.max_pairs], e.orders[:PRECISION.max_pairs],
                                  PRECISION) for e in pairs)
        reason = str(result.final.stop)
        reasons[reason] = reasons.get(reason, 0) + 1
    return RaceCell(races, float(within.mean()), float(spent.mean()), float(grid.mean()),
                    {k: v / races for k, v in sorted(reasons.items())})
