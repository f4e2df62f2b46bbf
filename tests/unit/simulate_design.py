"""Designs measured as a question's answer (issue 56): jobs of the audit's cells
(``DESIGN_CELLS``) at true speedups from 1.00 to 1.90 run through a design: the two-stage
default (first stage 4 pairs, at most 12, target ±3%: ``planned_pairs`` plans from the
first stage and ``estimate`` makes the interval of the pairs after it), its answer read from
its interval as `farm ab` read it (``farm.stats.design.answer``), or the decision design
(``DECISION``, its answer its look's: farm.stats.sequential), or the precision design
(``PRECISION``, its stop at the first look within ±3%): how many pairs it ran,
whether its interval holds the truth (the mean true speedup over the pairs it ran), and how often it
said "faster", "slower", "within ±3%" or nothing ("undecided"), how often that was
wrong, and how often its interval met ±3%. `tests/bench/bench_design.py` prints every cell
at 2,000 jobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import get_args

import numpy as np

from farm.stats.design import Answer, Design, answer
from farm.stats.sequential import decided, precise
from farm.stats.speedup import estimate
from farm.stats.twostage import planned_pairs
from tests.unit.simulate import DEFAULT, TWO_STAGE_CELLS, job_effects

# `farm ab`'s default: the decision design (farm.stats.sequential) over the same pairs.
DECISION = Design(first_stage=4, max_pairs=12, target=0.03, rule="decision")
# A matrix's default: the precision design (farm.stats.sequential) over the same pairs.
PRECISION = Design(first_stage=4, max_pairs=12, target=0.03, rule="precision")

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
    the share of wrong answers and the share of intervals within the target."""

    jobs: int
    mean_pairs: float
    coverage: float
    answers: dict[str, float]
    wrong: float
    met: float


def design_cell(kind: str, speedup: float, jobs: int, seed: int,
                design: Design = DEFAULT) -> DesignCell:
    """``jobs`` jobs of cell ``kind`` at a true ``speedup`` through ``design``: a decision
    design's answer is its look's (``decided``), any other's is read off its interval (a
    precision design's made where it stopped: ``precise``)."""
    rng = np.random.default_rng(seed)
    pairs = np.zeros(jobs, dtype=int)
    covered = np.zeros(jobs, dtype=bool)
    mistaken = np.zeros(jobs, dtype=bool)
    met = np.zeros(jobs, dtype=bool)
    answers = dict.fromkeys(VERDICTS, 0)
    for job in range(jobs):
        values, orders, effect = job_effects(rng, kind, design.max_pairs, design.first_stage,
                                             math.log(speedup))
        if design.rule == "decision":
            look = decided(values, orders, design)
            used, said = look.pairs, look.said
            found = estimate(values[:used], orders[:used], design).speedup
        else:
            used = (precise if design.sequential else planned_pairs)(values, orders, design)
            found = estimate(values[:used], orders[:used], design).speedup
            said = answer(found.low, found.high, design.target)
        truth = math.exp(float(effect[:used].mean()))
        pairs[job], answers[said] = used, answers[said] + 1
        covered[job] = found.low <= truth <= found.high
        mistaken[job] = wrong(said, truth)
        met[job] = found.half_width <= design.target
    return DesignCell(jobs, float(pairs.mean()), float(covered.mean()),
                      {name: count / jobs for name, count in answers.items()},
                      float(mistaken.mean()), float(met.mean()))
