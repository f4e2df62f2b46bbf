"""The two-stage design and the decision design as answers to "is it faster?" (a script,
not a test): every cell of ``tests.unit.simulate_design`` (the audit's cells x true
speedups 1.00-1.90) at ``JOBS`` jobs, seeded, the same jobs through both designs; per cell
each design's mean pairs, the decision design's share of the two-stage's pairs, its
intervals' coverage at the stop, each answer's share and the wrong answers'
(docs/statistics.md, "The decision design"). It asserts nothing:

    .venv/bin/python -m tests.bench.bench_design [JOBS]     # default 2000
"""

from __future__ import annotations

import sys
import time

from tests.unit.simulate import DEFAULT, binomial_sd
from tests.unit.simulate_design import DECISION, DESIGN_CELLS, SPEEDUPS, VERDICTS, design_cell


def main(jobs: int) -> None:
    started = time.perf_counter()
    print(f"{jobs} jobs a cell, the same jobs through both designs (4 to 12 pairs, ±3%); "
          f"coverage ± one binomial SD ({binomial_sd(0.95, jobs):.3f} at 0.95)\n")
    print("| cell | speedup | two-stage pairs | coverage | wrong | decision pairs | share | "
          "coverage | " + " | ".join(VERDICTS) + " | wrong |")
    print("|---|---|---|---|---|---|---|---|" + "---|" * len(VERDICTS) + "---|")
    for seed, (cell, kind) in enumerate(DESIGN_CELLS.items()):
        for step, speedup in enumerate(SPEEDUPS):
            today = design_cell(kind, speedup, jobs, 5600 + 10 * seed + step, DEFAULT)
            found = design_cell(kind, speedup, jobs, 5600 + 10 * seed + step, DECISION)
            shares = " | ".join(f"{found.answers[name]:.3f}" for name in VERDICTS)
            print(f"| {cell} | {speedup:.2f} | {today.mean_pairs:.1f} | {today.coverage:.3f} | "
                  f"{today.wrong:.3f} | {found.mean_pairs:.1f} | "
                  f"{found.mean_pairs / today.mean_pairs:.0%} | {found.coverage:.3f} | "
                  f"{shares} | {found.wrong:.3f} |", flush=True)
    print(f"\n{time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
