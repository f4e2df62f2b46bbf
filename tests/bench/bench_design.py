"""Today's default design as an answer to "is it faster?" (a script, not a test): every
cell of ``tests.unit.simulate_design`` (the audit's cells x true speedups 1.00-1.90) at
``JOBS`` jobs, seeded; per cell the mean pairs run, the intervals' coverage, each answer's
share and the wrong answers' (docs/statistics.md, "Pairs to an answer"). It asserts nothing:

    .venv/bin/python -m tests.bench.bench_design [JOBS]     # default 2000
"""

from __future__ import annotations

import sys
import time

from tests.unit.simulate import binomial_sd
from tests.unit.simulate_design import DESIGN_CELLS, SPEEDUPS, VERDICTS, design_cell


def main(jobs: int) -> None:
    started = time.perf_counter()
    print(f"default design (4 first-stage pairs, at most 12, target ±3%), {jobs} jobs a cell; "
          f"coverage ± one binomial SD ({binomial_sd(0.95, jobs):.3f} at 0.95)\n")
    print("| cell | speedup | mean pairs | coverage | " + " | ".join(VERDICTS) + " | wrong |")
    print("|---|---|---|---|" + "---|" * len(VERDICTS) + "---|")
    for seed, (cell, kind) in enumerate(DESIGN_CELLS.items()):
        for step, speedup in enumerate(SPEEDUPS):
            found = design_cell(kind, speedup, jobs, 5600 + 10 * seed + step)
            shares = " | ".join(f"{found.answers[name]:.3f}" for name in VERDICTS)
            print(f"| {cell} | {speedup:.2f} | {found.mean_pairs:.1f} | "
                  f"{found.coverage:.3f} | {shares} | {found.wrong:.3f} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
