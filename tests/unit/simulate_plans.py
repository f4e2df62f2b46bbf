"""Fixed-seed simulations of two-stage jobs run pair by pair through the job's own stopping
rule (``farm.stats.twostage.stop_decision``, as ``workers.job.executor`` calls it after
each pair), then ``estimate``: how often a plan meets its target, how often a job that
misses it says "target not reachable", and the interval's coverage (issue 38, item 3).
The plan tests (tests/unit/test_stats_plans.py) run them with few replicates,
tests/bench/bench_plans.py with many. Each cell returns its figures; none asserts anything.

The jobs are the audit's (/work/shared/statsaudit2/sim1_twostage.py), at the pair level
(``tests.unit.simulate.job_pairs``): block SD U(1%, 5%) and run SD U(1%, 6%) a job, a true
speedup of 1.3, noise steady or doubling after the first stage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from farm.stats.design import Design, StopDecision
from farm.stats.speedup import estimate
from farm.stats.twostage import planned_pairs, stop_decision
from farm.words import NOT_REACHABLE
from tests.unit.simulate import ASSURED, TRUE_LOG, job_pairs

# The audit's assured plans: recommend's verification design, and the same with room.
VERIFY = Design(first_stage=12, max_pairs=48, target=0.025, assurance=0.9)
ASSURED_DESIGNS = {"max 100": ASSURED, "max 48": VERIFY}
# The cells of the plan tests (tests.unit.simulate's kinds).
PLAN_CELLS = {"steady": "normal", "noise doubling": "louder_after"}


def run_job(values: npt.NDArray[np.float64], orders: npt.NDArray[np.int64],
            design: Design) -> tuple[int, StopDecision]:
    """The pairs a job runs and why it stops: ``stop_decision`` after each pair, as the
    executor asks it, on the pairs run so far."""
    for pairs in range(1, design.max_pairs + 1):
        decision = stop_decision(values[:pairs], orders[:pairs], design, pairs)
        if decision.stop:
            return pairs, decision
    raise AssertionError(f"no stop at max pairs ({design.max_pairs})")


@dataclass(frozen=True)
class PlanCell:
    """A cell's figures: the share of jobs that met the target, that missed it and said
    "target not reachable" (their coverage), that missed it without saying so; coverage
    overall, for the
    jobs that stop earliest (how many those are), for those that stop at their first
    stage's plan (``planned_pairs``) and for those that run on past it (how many: their
    share); the mean pairs run, and the share of jobs that ran to the maximum."""

    met: float
    said: float
    said_coverage: float
    silent: float
    coverage: float
    earliest: float
    earliest_jobs: int
    at_plan: float
    ran_on: float
    ran_on_coverage: float
    mean_pairs: float
    at_max: float


def plan_cell(kind: str, design: Design, jobs: int, seed: int) -> PlanCell:
    """``jobs`` jobs of one scenario (``tests.unit.simulate.job_pairs``' kind) run through
    ``stop_decision`` pair by pair, then ``estimate`` on the pairs they ran."""
    rng = np.random.default_rng(seed)
    used = np.zeros(jobs, dtype=int)
    covered = np.zeros(jobs, dtype=bool)
    met = np.zeros(jobs, dtype=bool)
    said = np.zeros(jobs, dtype=bool)
    plans = np.zeros(jobs, dtype=int)
    truth = math.exp(TRUE_LOG)
    for job in range(jobs):
        values, orders = job_pairs(rng, kind, design.max_pairs, design.first_stage)
        pairs, decision = run_job(values, orders, design)
        found = estimate(values[:pairs], orders[:pairs], design).speedup
        used[job], plans[job] = pairs, planned_pairs(values, orders, design)
        covered[job] = found.low <= truth <= found.high
        met[job] = found.half_width <= design.target
        said[job] = decision.reason.startswith(NOT_REACHABLE)
    earliest, ran_on, said = used == used.min(), used > plans, ~met & said
    return PlanCell(float(met.mean()), float(said.mean()),
                    float(covered[said].mean()) if said.any() else math.nan,
                    float((~met & ~said).mean()), float(covered.mean()),
                    float(covered[earliest].mean()), int(earliest.sum()),
                    float(covered[used == plans].mean()), float(ran_on.mean()),
                    float(covered[ran_on].mean()) if ran_on.any() else math.nan,
                    float(used.mean()), float((used == design.max_pairs).mean()))
