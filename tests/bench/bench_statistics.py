"""Statistics benchmark (a script, not a test): the audit's grid (issue 24) with many
replicates, on the farm's own functions (``tests.unit.simulate``), beside the audit's
figures for the code before (its 2,000-4,000 replicates per cell).

Prints one table per method: the cell, the figure before, the figure now, and its binomial
standard error. Pure numpy: about 4 minutes for 4,000 replicates on one core.

    .venv/bin/python -m tests.bench.bench_statistics [--jobs 4000]    (from the checkout)
"""

from __future__ import annotations

import argparse
import time

from tests.unit.simulate import (
    ASSURED,
    DEFAULT,
    TWO_STAGE_CELLS,
    acceptance_cell,
    difference_cell,
    drift_cell,
    plus_minus,
    two_stage_cell,
)

# The audit's figures, before issue 24 (the text; "" where it gave none).
BEFORE_COVERAGE = {"steady": "0.951 / 0.950", "noisy warm-up": "0.908 / 0.920",
                   "wandering speedup": "0.905 / -"}
BEFORE_WITHOUT_DESIGN = {"steady": "0.900", "wandering speedup": "0.807"}
BEFORE_MET = {"steady": "0.928", "noise doubling": "0.256"}
BEFORE_DRIFT = {"iid": "0.058", "ar0.5": "0.197", "ar0.8": "0.405"}



def main() -> None:
    """Run every cell and print the tables."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=4000, help="replicates per cell")
    jobs = parser.parse_args().jobs
    began = time.monotonic()
    print(f"two-stage rule, {DEFAULT} ({jobs} jobs a cell): coverage overall / earliest")
    print(f"{'cell':<20} {'before':>14} {'now':>14} {'earliest n':>10} {'no design':>10} "
          f"{'before':>7} {'mean pairs':>10} {'met':>6}")
    for seed, (name, kind) in enumerate(TWO_STAGE_CELLS.items()):
        cell = two_stage_cell(kind, DEFAULT, jobs, 100 + seed)
        print(f"{name:<20} {BEFORE_COVERAGE.get(name, ''):>14} "
              f"{cell.coverage:.3f} / {cell.earliest:.3f} {cell.earliest_jobs:>10} "
              f"{cell.without_design:>10.3f} {BEFORE_WITHOUT_DESIGN.get(name, ''):>7} "
              f"{cell.mean_pairs:>10.1f} {cell.met:>6.3f}", flush=True)
    assured_jobs = max(jobs // 4, 200)
    print(f"\nassured plan, {ASSURED} ({assured_jobs} jobs a cell): target met "
          f"(claim >= {(ASSURED.assurance or 0.0) - 0.05:.2f}), coverage")
    for seed, name in enumerate(("steady", "noise doubling", "noisy warm-up")):
        cell = two_stage_cell(TWO_STAGE_CELLS[name], ASSURED, assured_jobs, 200 + seed)
        print(f"{name:<20} met before {BEFORE_MET.get(name, '-'):>6} now {cell.met:.3f} "
              f"{plus_minus(cell.met, assured_jobs)}; coverage {cell.coverage:.3f}; "
              f"mean pairs {cell.mean_pairs:.1f}", flush=True)
    drift_jobs = max(jobs // 2, 200)
    print(f"\ndrift test, steady machine, 16 blocks ({drift_jobs} jobs a cell)")
    for seed, blocks in enumerate(("iid", "t3", "ar0.5", "ar0.8")):
        rate = drift_cell(blocks, drift_jobs, 700 + seed)
        print(f"{blocks:<8} false positives before {BEFORE_DRIFT.get(blocks, '-'):>6} "
              f"now {rate:.3f} {plus_minus(rate, drift_jobs)}", flush=True)
    for seed, blocks in enumerate(("iid", "ar0.5")):
        power = drift_cell(blocks, drift_jobs, 710 + seed, total_change=-0.10)
        print(f"{blocks:<8} power for -10% over 16 blocks {power:.3f}", flush=True)
    accepted = acceptance_cell(jobs, 800)
    print(f"\nacceptance, 4 prompts x 18 identical runs: covers the prompts' population "
          f"before 0.297, now {accepted:.3f} {plus_minus(accepted, jobs)}", flush=True)
    rounds = max(jobs // 20, 50)
    null = difference_cell(rounds, 900)
    changed = difference_cell(rounds, 901, changed=10)
    print(f"\ndifference test, ±3% jobs ({rounds} rounds of 20 jobs): 20 null jobs FDR "
          f"{null.fdr:.3f} (any false call {null.any_false:.3f}); 10 of 20 changed by 5%: "
          f"FDR {changed.fdr:.3f}, power {changed.power:.3f}")
    print(f"\n{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
