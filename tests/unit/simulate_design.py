"""Today's design measured as a question's answer (issue 56, item 1): jobs of the audit's
cells (``DESIGN_CELLS``) at true speedups from 1.00 to 1.90 run through the default design
(first stage 4 pairs, at most 12, target ±3%: ``planned_pairs`` plans from the first stage
and ``estimate`` makes the interval of the pairs after it), and each job's answer read from
its interval as `farm ab` reads it (``farm.stats.design.answer``): how many pairs it ran,
whether its interval holds the truth (the mean true speedup over the pairs it ran), and how often it
said "faster", "slower", "within ±3%" or nothing ("undecided"), and how often that was
wrong. `tests/bench/bench_design.py` prints every cell at 2,000 jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

import numpy as np

from farm.stats.design import Answer, Design, answer
from farm.stats.speedup import estimate
from farm.stats.twostage import planned_pairs
from tests.unit.simulate import DEFAULT, TWO_STAGE_CELLS, job_effects

# The audit's cells (simulate.TWO_STAGE_CELLS) and those issue 56 adds.
DESIGN_CELLS = {**TWO_STAGE_CELLS, "AR(1) 0.8 blocks": "ar0.8", "random-walk speedup": "walk"}
SPEEDUPS = (1.00, 1.02, 1.05, 1.10, 1.30, 1.90)
VERDICTS = get_args(Answer)
# A "faster" (or "slower") said of a true speedup within this of 1x is wrong.
NEGLIGIBLE = 0.01


def wrong(said: Answer, truth: float) -> bool:
    """Whether ``said`` is wrong of a true speedup ``truth``: a direction against it, a
    direction where it is within ``NEGLIGIBLE`` of 1x, or "within" where it is outside."""
    if said == "faster":
        return truth <= 1 + NEGLIGIBLE
    if said == "slower":
        return truth >= 1 - NEGLIGIBLE
    return said == "within" and not 1 - DEFAULT.target <= truth <= 1 + DEFAULT.target


@dataclass(frozen=True)
class DesignCell:
    """One cell's figures: mean pairs run, the intervals' coverage, each answer's share,
    and the share of wrong answers."""

    jobs: int
    mean_pairs: float
    coverage: float
    answers: dict[str, float]
    wrong: float


def design_cell(kind: str, speedup: float, jobs: int, seed: int,
                design: Design = DEFAULT) -> DesignCell:
    """``jobs`` jobs of cell ``kind`` at a true ``speedup`` through ``design``."""
    rng = np.random.default_rng(seed)
    pairs = np.zeros(jobs, dtype=int)
    covered = np.zeros(jobs, dtype=bool)
    mistaken = np.zeros(jobs, dtype=bool)
    answers = dict.fromkeys(VERDICTS, 0)
    for job in range(jobs):
        values, orders, effect = job_effects(rng, kind, design.max_pairs, design.first_stage,
                                             math.log(speedup))
        used = planned_pairs(values, orders, design)
        found = estimate(values[:used], orders[:used], design).speedup
        truth = math.exp(float(effect[:used].mean()))
        said = answer(found.low, found.high, design.target)
        pairs[job], answers[said] = used, answers[said] + 1
        covered[job] = found.low <= truth <= found.high
        mistaken[job] = wrong(said, truth)
    return DesignCell(jobs, float(pairs.mean()), float(covered.mean()),
                      {name: count / jobs for name, count in answers.items()},
                      float(mistaken.mean()))
