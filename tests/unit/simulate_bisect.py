"""Simulated bisects through the decision code of ``farm bisect`` (``farm.stats.bisect``):
a run of commits with one change planted at a random one (or none), each job measuring a
commit against good in one job, as ``farm bisect`` does.

Each job meets the machine in its own state: a factor exp(s), s ~ N(0, ``tau``) a job,
moves both builds of the job alike. A change is added, not multiplied (a fixed cost of
3 ms a round does not grow with a slower machine): the commit's value is exp(s) + c
against good's exp(s), so the job's log ratio log(1 + c exp(-s)) carries part of the
machine's drift when c is not 0 (a +30% change at tau 0.20: 0.22 to 0.31 over +-1 sd),
and none when nothing changed. On top, the job's own noise, its standard error read from
a chi-square on its df as a job's own spread is.

The figures in docs/bisect.md come from ``cell_rates`` (``python -m
tests.unit.simulate_bisect 10000`` prints them with more bisects a cell).
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass

import numpy as np

from farm.stats.bisect import (
    PRIOR,
    Contrasts,
    Jobs,
    Measure,
    Outcome,
    Plan,
    bisect,
    paired_contrasts,
)


@dataclass(frozen=True)
class Cell:
    """``commits`` after good (bad the last), the change bad / good (1: none), one job's
    log standard error and df, the machine's drift between jobs (log sd), the share of
    commits that do not build, and a drift between jobs that moves the two builds of a job
    unevenly (log sd of the job's ratio: what the pairing cannot remove)."""

    commits: int
    change: float
    noise: float
    df: int
    tau: float = 0.0
    broken: float = 0.0
    uneven: float = 0.0


@dataclass(frozen=True)
class Rates:
    """Over the bisects: the share naming a wrong commit (or a range without the first bad
    one), the share naming the right one (or a range with it), the share stopping with no
    difference, and the mean jobs a bisect (pairs are in proportion)."""

    wrong: float
    right: float
    no_difference: float
    jobs: float
    bound: float


class SimulatedEvidence:
    """One bisect's measurements: ``first_bad`` (None: no change), some commits broken."""

    def __init__(self, cell: Cell, first_bad: int | None, rng: np.random.Generator) -> None:
        self.cell, self.rng = cell, rng
        self.added = [cell.change - 1.0 if first_bad is not None and index >= first_bad
                      else 0.0 for index in range(cell.commits + 1)]
        self.broken = {index for index in range(1, cell.commits)
                       if rng.random() < cell.broken}
        self.jobs = Jobs(PRIOR)
        self.ends_jobs = 0

    def _pooled(self, index: int, jobs: int) -> Measure:
        cell = self.cell
        while self.jobs.count(index) < jobs:
            machine = math.exp(self.rng.normal(0.0, cell.tau))
            true = math.log1p(self.added[index] / machine)
            se = cell.noise * math.sqrt(self.rng.chisquare(cell.df) / cell.df)
            shift = self.rng.normal(0.0, cell.uneven) if cell.uneven else 0.0
            self.jobs.add(index, Measure(true + shift + self.rng.normal(0.0, cell.noise),
                                         se, float(cell.df)))
        return self.jobs.pooled(index, jobs)

    def ends(self, jobs: int) -> Measure:
        """log(bad / good) over bad's first ``jobs`` jobs."""
        self.ends_jobs = jobs
        return self._pooled(self.cell.commits, jobs)

    def candidate(self, index: int, rounds: int) -> Contrasts | None:
        """Candidate ``index`` against the ends, as measured so far."""
        if index in self.broken:
            return None
        found = self._pooled(index, rounds)
        return paired_contrasts(found, self.jobs.pooled(self.cell.commits, self.ends_jobs))


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
    wrong = right = flat = jobs = 0
    for _ in range(bisects):
        first_bad = int(rng.integers(1, cell.commits + 1)) if cell.change != 1.0 else None
        evidence = SimulatedEvidence(cell, first_bad, rng)
        outcome = bisect(plan, evidence)
        named = named_right(outcome, first_bad)
        wrong += named is False
        right += named is True
        flat += outcome.answer == "no difference"
        jobs += sum(len(made) for made in evidence.jobs.made.values())
    return Rates(wrong / bisects, right / bisects, flat / bisects, jobs / bisects,
                 plan.alpha)


CELLS = {
    "8 commits, -17%, 4% a job (df 4)": Cell(8, 0.83, 0.04, 4),
    "64 commits, -10%, 3% a job (df 8)": Cell(64, 0.90, 0.03, 8),
    "16 commits, -17%, a quarter broken": Cell(16, 0.83, 0.04, 4, broken=0.25),
    **{f"8 commits, +30% cost, 5% a job (df 5), tau {tau:.2f}": Cell(8, 1.30, 0.05, 5, tau)
       for tau in (0.0, 0.05, 0.10, 0.20)},
    **{f"16 commits, no change, 4% a job (df 5), tau {tau:.2f}": Cell(16, 1.0, 0.04, 5, tau)
       for tau in (0.0, 0.10)},
    "64 commits, +30% cost, 5% a job (df 5), tau 0.20": Cell(64, 1.30, 0.05, 5, 0.20),
    **{f"{name}, builds drift unevenly by {uneven:.0%} a job": Cell(
        commits, change, 0.04, 5, 0.10, uneven=uneven) for name, commits, change in (
            ("8 commits, +30% cost", 8, 1.30), ("16 commits, no change", 16, 1.0))
       for uneven in (0.03, 0.06)},
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
              f" | {short:.3f} | {rates.jobs:.1f} | {rates.bound:.2f} |", flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
