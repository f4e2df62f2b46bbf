"""Acceptance-interval benchmark (a script, not a test): ``rate_interval``'s coverage when
prompts differ (issue 38, item 5), on the audit's model (``tests.unit.simulate_acceptance``),
beside the figures before the issue (the linearised interval, 2,000 replicates a cell).

Prints one row per cell: prompt logit SD, prompts, coverage before, coverage now with its
binomial standard error, the truth below / above the interval, and the median half-width.
Pure numpy: a few seconds for 2,000 replicates a cell.

    .venv/bin/python -m tests.bench.bench_acceptance [--jobs 2000]    (from the checkout)
"""

from __future__ import annotations

import argparse
import time

from tests.unit.simulate import plus_minus
from tests.unit.simulate_acceptance import CELLS, coverage_cell, truth

# The linearised interval before issue 38, a symmetric t interval on the rate scale (this
# bench, the same seeds, 2,000 replicates a cell): coverage (truth below / above).
BEFORE = {(0.5, 3): "0.953 (0.036/0.011)", (0.5, 4): "0.940 (0.044/0.017)",
          (0.5, 8): "0.942 (0.042/0.016)", (1.0, 3): "0.917 (0.068/0.015)",
          (1.0, 4): "0.911 (0.077/0.011)", (1.0, 8): "0.919 (0.061/0.019)"}



def main() -> None:
    """Run every cell and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000, help="replicates per cell")
    jobs = parser.parse_args().jobs
    began = time.monotonic()
    print(f"acceptance interval, 30 runs a prompt ({jobs} jobs a cell; the claim 0.95)")
    print(f"{'SD':>4} {'prompts':>7} {'truth':>7} {'before (below/above)':>20} {'now':>7} {'':>6} "
          f"{'below':>6} {'above':>6} {'half-width':>10}")
    for seed, (sigma, prompts) in enumerate(CELLS):
        cell = coverage_cell(jobs, prompts, sigma, 3800 + seed)
        print(f"{sigma:>4} {prompts:>7} {truth(sigma):>7.4f} "
              f"{BEFORE.get((sigma, prompts), '-'):>20} {cell.coverage:>7.3f} "
              f"{plus_minus(cell.coverage, jobs):>6} {cell.below:>6.3f} {cell.above:>6.3f} "
              f"{cell.half_width:>10.3f}", flush=True)
    print(f"\n{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
