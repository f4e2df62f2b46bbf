"""Simulated bisects through the decision code of ``farm bisect`` (``farm.stats.bisect``):
a run of commits with one change planted at a random one (or none), each job's measure
its true log value plus noise, its standard error read from a chi-square on its df as a
job's own spread is.

The figures in docs/bisect.md come from ``cell_rates`` (``python -m
tests.unit.simulate_bisect 10000`` prints them with more bisects a cell).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Literal

import numpy as np

from farm.stats.bisect import (
    Contrasts,
    Measure,
    Outcome,
    Plan,
    bisect,
    combine,
    job_contrasts,
    paired_contrasts,
    pooled,
)


@dataclass(frozen=True)
class Cell:
    """``commits`` after good (bad the last), the change bad / good (1: none), one job's
    log standard error and df, the design (one job across two builds, or each build's own
    job), and the share of commits that do not build."""

    commits: int
    change: float
    noise: float
    df: int
    design: Literal["paired", "jobs"]
    broken: float = 0.0


@dataclass(frozen=True)
class Rates:
    """Over the bisects: the share naming a wrong commit (or a range without the first bad
    one), the share naming the right one (or a range with it), the share stopping with no
    difference, and the mean rounds measured a bisect (jobs, as pairs are in proportion)."""

    wrong: float
    right: float
    no_difference: float
    rounds: float
    bound: float


class SimulatedEvidence:
    """One bisect's measurements: ``first_bad`` (None: no change), some commits broken."""

    def __init__(self, cell: Cell, first_bad: int | None, rng: np.random.Generator) -> None:
        self.cell, self.rng = cell, rng
        step = math.log(cell.change)
        self.level = [step if first_bad is not None and index >= first_bad else 0.0
                      for index in range(cell.commits + 1)]
        self.broken = {index for index in range(1, cell.commits)
                       if rng.random() < cell.broken}
        self.jobs: dict[int, list[Measure]] = {}
        self.used = 0

    def _job(self, true: float) -> Measure:
        cell = self.cell
        se = cell.noise * math.sqrt(self.rng.chisquare(cell.df) / cell.df)
        self.used += 1
        return Measure(true + self.rng.normal(0.0, cell.noise), se, float(cell.df))

    def _rounds(self, index: int, rounds: int) -> Measure:
        """Pooled measure of ``index``: against good (paired) or its own value (jobs)."""
        made = self.jobs.setdefault(index, [])
        true = self.level[index] - (self.level[0] if self.cell.design == "paired" else 0.0)
        while len(made) < rounds:
            made.append(self._job(true))
        return pooled(made[:rounds])

    def ends(self, rounds: int) -> Measure:
        """log(bad / good)."""
        bad = self._rounds(self.cell.commits, rounds)
        if self.cell.design == "paired":
            return bad
        return combine((1.0, bad), (-1.0, self._rounds(0, rounds)))

    def candidate(self, index: int, rounds: int) -> Contrasts | None:
        """Candidate ``index`` against the ends, as measured so far."""
        if index in self.broken:
            return None
        ends_rounds = len(self.jobs[self.cell.commits])
        if self.cell.design == "paired":
            return paired_contrasts(self._rounds(index, rounds),
                                    self._rounds(self.cell.commits, ends_rounds))
        return job_contrasts(self._rounds(0, ends_rounds),
                             self._rounds(self.cell.commits, ends_rounds),
                             self._rounds(index, rounds))


def named_right(outcome: Outcome, first_bad: int | None) -> bool | None:
    """True when the outcome names the first bad commit (or a range holding it), False
    when it names another, None when it names none."""
    if outcome.answer not in ("found", "skipped"):
        return None
    return first_bad is not None and outcome.low < first_bad <= outcome.high


def cell_rates(cell: Cell, bisects: int, seed: int) -> Rates:
    """``bisects`` simulated bisects of ``cell``, the first bad commit uniform over 1..n."""
    rng = np.random.default_rng(seed)
    plan = Plan(cell.commits)
    wrong = right = flat = rounds = 0
    for _ in range(bisects):
        first_bad = int(rng.integers(1, cell.commits + 1)) if cell.change != 1.0 else None
        evidence = SimulatedEvidence(cell, first_bad, rng)
        outcome = bisect(plan, evidence)
        named = named_right(outcome, first_bad)
        wrong += named is False
        right += named is True
        flat += outcome.answer == "no difference"
        rounds += evidence.used
    return Rates(wrong / bisects, right / bisects, flat / bisects, rounds / bisects,
                 plan.alpha)


CELLS = {
    "8 commits, -17%, paired, 4% a job (df 4)": Cell(8, 0.83, 0.04, 4, "paired"),
    "8 commits, +30% cost, jobs, 5% a job (df 5)": Cell(8, 1.30, 0.05, 5, "jobs"),
    "64 commits, -10%, paired, 3% a job (df 8)": Cell(64, 0.90, 0.03, 8, "paired"),
    "16 commits, -8%, jobs, 3% a job (df 5)": Cell(16, 0.92, 0.03, 5, "jobs"),
    "16 commits, -17%, paired, a quarter broken": Cell(16, 0.83, 0.04, 4, "paired", 0.25),
    "16 commits, no change, paired, 4% a job": Cell(16, 1.0, 0.04, 4, "paired"),
    "16 commits, no change, jobs, 4% a job": Cell(16, 1.0, 0.04, 5, "jobs"),
}


def main(bisects: int) -> None:
    """Print each cell's rates as a markdown table."""
    print("| cell | wrong commit | right commit | no difference | stopped short | jobs a "
          "bisect | bound |")
    print("|---|---|---|---|---|---|---|")
    for seed, (name, cell) in enumerate(CELLS.items()):
        rates = cell_rates(cell, bisects, seed)
        short = 1.0 - rates.wrong - rates.right - rates.no_difference
        print(f"| {name} | {rates.wrong:.4f} | {rates.right:.3f} | {rates.no_difference:.3f}"
              f" | {short:.3f} | {rates.rounds:.1f} | {rates.bound:.2f} |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
