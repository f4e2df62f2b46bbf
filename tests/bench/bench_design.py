"""The two-stage design against the decision design, as answers to "is it faster?", and
against the precision design, as intervals within ±3% (a script, not a test): every cell of
``tests.unit.simulate_design`` (the audit's cells x true speedups 1.00-1.90) at ``JOBS``
jobs, seeded, the same jobs through the three designs; per cell each design's mean pairs,
its share of the two-stage's pairs, its intervals' coverage at the stop, the decision
design's answers and wrong answers, and the share of intervals within ±3%
(docs/statistics.md, "The decision design" and "The precision design"). It asserts
nothing:

    .venv/bin/python -m tests.bench.bench_design [JOBS]     # default 2000
"""

from __future__ import annotations

import sys
import time

from tests.unit.simulate import DEFAULT, binomial_sd
from tests.unit.simulate_design import (
    DECISION,
    DESIGN_CELLS,
    PRECISION,
    SPEEDUPS,
    VERDICTS,
    design_cell,
)


def main(jobs: int) -> None:
    started = time.perf_counter()
    print(f"{jobs} jobs a cell, the same jobs through the three designs (4 to 12 pairs, ±3%); "
          f"coverage ± one binomial SD ({binomial_sd(0.95, jobs):.3f} at 0.95)\n")
    print("| cell | speedup | two-stage pairs | coverage | wrong | met ±3% | decision pairs | "
          "share | coverage | " + " | ".join(VERDICTS) + " | wrong | precision pairs | share "
          "| coverage | met ±3% |")
    print("|---|---|---|---|---|---|---|---|---|" + "---|" * len(VERDICTS) + "---|---|---|---|"
          "---|")
    for seed, (cell, kind) in enumerate(DESIGN_CELLS.items()):
        for step, speedup in enumerate(SPEEDUPS):
            today = design_cell(kind, speedup, jobs, 5600 + 10 * seed + step, DEFAULT)
            found = design_cell(kind, speedup, jobs, 5600 + 10 * seed + step, DECISION)
            precise = design_cell(kind, speedup, jobs, 5600 + 10 * seed + step, PRECISION)
            shares = " | ".join(f"{found.answers[name]:.3f}" for name in VERDICTS)
            print(f"| {cell} | {speedup:.2f} | {today.mean_pairs:.1f} | {today.coverage:.3f} | "
                  f"{today.wrong:.3f} | {today.met:.2f} | {found.mean_pairs:.1f} | "
                  f"{found.mean_pairs / today.mean_pairs:.0%} | {found.coverage:.3f} | "
                  f"{shares} | {found.wrong:.3f} | {precise.mean_pairs:.1f} | "
                  f"{precise.mean_pairs / today.mean_pairs:.0%} | {precise.coverage:.3f} | "
                  f"{precise.met:.2f} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
