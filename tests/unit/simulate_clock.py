"""Fixed-seed simulations of the client's clock as the witness (issue 55, item 13), calling
the farm's own ``farm.stats.clock.clock_check``: how often it flags honest jobs and how
often a server that lies about its speed. tests/unit/test_stats_clock.py runs the cells with
few jobs; ``python -m tests.unit.simulate_clock JOBS`` prints them with many (the figures
of docs/security.md, "The client's clock as the witness").

A job's decode speeds are the audit's (``simulate.runs_frame`` over ``simulate.block_noise``:
block SD 1-5%, run SD 1-6%, in each of the audit's noise cells): both clocks time that same
generation, so the speed's own noise is common to them. What sets them apart is the
stream's: per block and per run, log(server / client) of the SDs measured on this machine's
honest jobs (``RATIO_BLOCK_SD``, ``RATIO_RUN_SD``), shaped by the same cell, times
``scale``. A lying server multiplies what it reports.
"""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd

from farm.stats.clock import clock_check
from tests.unit.simulate import TWO_STAGE_CELLS, block_noise, runs_frame

# The spread of log(server / client) measured on honest jobs here (docs/security.md): the
# SD of runs about their block's mean, and of block means about their arm's.
RATIO_RUN_SD = 0.0062
RATIO_BLOCK_SD = 0.0036
# The smallest design a job may stop at: the default first stage, 4 pairs of blocks of
# 4 prompts x 3 repetitions (simulate.runs_frame).
PAIRS = 4
LIE = 1.6


def clock_job(rng: np.random.Generator, kind: str, *, variant_lie: float = 1.0,
              both_lie: float = 1.0, scale: float = 1.0) -> pd.DataFrame:
    """One job's runs with both clocks: the server's figure times its lie (``variant_lie``
    in the variant alone, ``both_lie`` in both arms), the client's the true speed less the
    stream's noise in cell ``kind`` (``simulate.TWO_STAGE_CELLS``' kinds)."""
    blocks = 2 * PAIRS
    speeds = runs_frame(rng, PAIRS, block_noise(rng, kind, blocks, rng.uniform(0.01, 0.05),
                                                PAIRS), run_sd=rng.uniform(0.01, 0.06))
    block = speeds["block"].to_numpy()
    stream = (block_noise(rng, kind, blocks, scale * RATIO_BLOCK_SD, PAIRS)[block]
              + rng.normal(0, scale * RATIO_RUN_SD, block.size))
    variant = (speeds["arm"] == "variant").to_numpy()
    true = speeds["decode_tok_s"].to_numpy()
    return speeds.assign(decode_tok_s=true * both_lie * np.where(variant, variant_lie, 1.0),
                         client_decode_tok_s=true * np.exp(-stream))


def flagged(kind: str, jobs: int, seed: int, **lies: float) -> float:
    """The share of ``jobs`` jobs of cell ``kind`` that ``clock_check`` flags."""
    rng = np.random.default_rng(seed)
    return float(np.mean([bool(clock_check(clock_job(rng, kind, **lies)).flag)
                          for _ in range(jobs)]))


# What each column of the table shows: honest jobs at the measured spread, at three and
# at five times it, a 1.6x lie in the variant alone and in both arms, and a lie at the
# tolerance's edge (1.05x) and past it (1.08x) in the variant.
CONDITIONS: dict[str, dict[str, float]] = {
    "honest": {}, "honest 3x": {"scale": 3.0}, "honest 5x": {"scale": 5.0},
    "1.6x variant": {"variant_lie": LIE}, "1.6x both": {"both_lie": LIE},
    "1.05x variant": {"variant_lie": 1.05}, "1.08x variant": {"variant_lie": 1.08}}


def main(jobs: int) -> None:
    """Print every cell's flagged share under every condition (``jobs`` jobs each)."""
    print(f"{'cell':<20}" + "".join(f"{name:>15}" for name in CONDITIONS))
    for seed, (cell, kind) in enumerate(TWO_STAGE_CELLS.items()):
        shares = [flagged(kind, jobs, 1000 * seed + index, **lies)
                  for index, lies in enumerate(CONDITIONS.values())]
        margin = 1.96 * math.sqrt(0.25 / jobs)
        print(f"{cell:<20}" + "".join(f"{share:>15.4f}" for share in shares)
              + f"   (±{margin:.3f} at worst)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)
