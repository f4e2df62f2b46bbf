"""`farm tune`'s race over every cell of ``tests.unit.simulate_race`` (6, 12 and 24
candidates; the best ahead of the runner-up by 0, 2, 5 and 10%; the audit's noise cells),
seeded, ``RACES`` races a cell: how often the setting named is within epsilon (2%) of the
true best (goal >= 0.95), the pairs the race spent, the pairs measuring every candidate to
±3% with the precision design took on the same pairs, their ratio (goal <= 1/3 at 12
candidates), and how the races stopped (docs/tune.md). Two processes (run it under the
CPU lock). It asserts nothing:

    flock /tmp/specfarm-cpu.lock .venv/bin/python -m tests.bench.bench_race [RACES]
"""

from __future__ import annotations

import sys
import time
from multiprocessing import Pool

from tests.unit.simulate import plus_minus
from tests.unit.simulate_design import DESIGN_CELLS
from tests.unit.simulate_race import CANDIDATES, GAPS, RaceCell, race_cell


def _cell(task: tuple[str, int, float, int, int]) -> tuple[str, int, float, RaceCell]:
    cell, candidates, gap, races, seed = task
    return cell, candidates, gap, race_cell(DESIGN_CELLS[cell], candidates, gap, races, seed)


def main(races: int) -> None:
    started = time.perf_counter()
    tasks = [(cell, candidates, gap, races, 8800 + 100 * c + 10 * k + g)
             for c, cell in enumerate(DESIGN_CELLS) for k, candidates in enumerate(CANDIDATES)
             for g, gap in enumerate(GAPS)]
    print(f"{races} races a cell; within ε ± one binomial SD ({plus_minus(0.95, races)} at "
          "0.95)\n")
    print("| cell | candidates | best ahead | within ε | race pairs | grid pairs | share | "
          "stopped |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 1.0
    with Pool(2) as pool:
        for cell, candidates, gap, found in pool.imap(_cell, tasks):
            worst = min(worst, found.within)
            stops = ", ".join(f"{name} {share:.2f}" for name, share in found.reasons.items())
            print(f"| {cell} | {candidates} | {gap:.0%} | {found.within:.3f} | "
                  f"{found.race_pairs:.1f} | {found.grid_pairs:.1f} | {found.share:.2f} | "
                  f"{stops} |", flush=True)
    print(f"\nlowest within ε: {worst:.3f}; {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
