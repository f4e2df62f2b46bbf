"""Plans benchmark (a script, not a test): issue 38 item 3's grid with many replicates, on
the farm's own stopping rule (``tests.unit.simulate_plans``), beside the figures of the
code before (this script at 2,000 replicates a cell, seeds as here).

Prints, for the assured plans (first stage 12, ±2.5%, assurance 0.9) at max pairs 100 and
48, steady and noise doubling: target met, missed and said "target not reachable", missed
silently, coverage (overall / earliest stoppers), mean pairs and the share at the maximum;
then the default design (4/12/±3%) in every two-stage cell. Pure numpy: about 5 minutes for
2,000 replicates on one core.

    .venv/bin/python -m tests.bench.bench_plans [--jobs 2000]    (from the checkout)
"""

from __future__ import annotations

import argparse
import time

from tests.unit.simulate import DEFAULT, TWO_STAGE_CELLS, plus_minus
from tests.unit.simulate_plans import ASSURED_DESIGNS, PLAN_CELLS, PlanCell, plan_cell

# The code before (c73afe3's rule: the plan alone, without the autocorrelation factor, and
# no flag), 2,000 a cell: target met, coverage, mean pairs; coverage / earliest, pairs.
BEFORE_ASSURED = {("max 100", "steady"): "0.877, 0.950, 46.1",
                  ("max 100", "noise doubling"): "0.208, 0.958, 45.2",
                  ("max 48", "steady"): "0.806, 0.961, 38.3",
                  ("max 48", "noise doubling"): "0.165, 0.958, 38.2"}
BEFORE_DEFAULT = {"steady": "0.969 / 0.975, 10.9", "heavy tails (t3)": "0.963 / 0.971, 10.6",
                  "noisy warm-up": "0.948 / 0.956, 10.9", "noise doubling": "0.965 / 0.967, 10.9",
                  "wandering speedup": "0.935 / 0.974, 11.2",
                  "AR(1) 0.5 blocks": "0.957 / 0.958, 10.5"}



def _row(cell: PlanCell, jobs: int) -> str:
    return (f"{cell.met:>6.3f} {plus_minus(cell.met, jobs):>6} {cell.said:>6.3f} "
            f"{cell.said_coverage:>8.3f} {cell.silent:>7.3f} "
            f"{cell.coverage:>6.3f} / {cell.earliest:.3f} ({cell.earliest_jobs:>4}) "
            f"{cell.at_plan:>7.3f} {cell.ran_on_coverage:>6.3f} ({cell.ran_on:.2f}) "
            f"{cell.mean_pairs:>6.1f} {cell.at_max:>6.3f}")


HEADER = (f"{'met':>6} {'':>6} {'said':>6} {'said cov':>8} {'silent':>7} "
          f"{'coverage / earliest (n)':>23} {'at plan':>7} {'ran on (share)':>13} "
          f"{'pairs':>6} {'at max':>6}")


def main() -> None:
    """Run every cell and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000, help="replicates per cell")
    jobs = parser.parse_args().jobs
    began = time.monotonic()
    print(f"assured plans ({jobs} jobs a cell); said: missed and said 'target not "
          f"reachable' (said cov: their coverage); silent: missed without saying so; "
          f"coverage overall / earliest stoppers, at their plan, ran on past it")
    print(f"{'design':<8} {'cell':<15} {HEADER}   before (met, coverage, pairs)")
    for seed, (design_name, design) in enumerate(ASSURED_DESIGNS.items()):
        for offset, (name, kind) in enumerate(PLAN_CELLS.items()):
            cell = plan_cell(kind, design, jobs, 300 + 10 * seed + offset)
            print(f"{design_name:<8} {name:<15} {_row(cell, jobs)}   "
                  f"{BEFORE_ASSURED.get((design_name, name), '-')}", flush=True)
    print(f"\ndefault design, {DEFAULT} ({jobs} jobs a cell)")
    print(f"{'cell':<24} {HEADER}   before (coverage / earliest, pairs)")
    for seed, (name, kind) in enumerate(TWO_STAGE_CELLS.items()):
        cell = plan_cell(kind, DEFAULT, jobs, 400 + seed)
        print(f"{name:<24} {_row(cell, jobs)}   {BEFORE_DEFAULT.get(name, '-')}", flush=True)
    print(f"\n{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
