"""Fixed-seed simulations of the drift flag on the second audit's generator (issue 38,
/work/shared/statsaudit2/sim2_drift.py and common.py): a steady machine whose block
offsets are AR(1), optionally plus a linear trend, measured through ``drift(runs)`` on a
runs frame. tests/unit/test_stats_drift_ar.py runs it with few replicates,
tests/bench/bench_drift.py with many. Each cell returns its figure; none asserts anything.

A job: counterbalanced AB/BA block pairs, 4 prompts x 3 repetitions a block, a true
speedup of 1.3; each job draws its block SD from U(1%, 5%) and its run SD from U(1%, 6%).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from farm.stats.drift import Drift, drift
from tests.unit.simulate import ar1, runs_frame

SPEEDUP = 1.3
# The ranges a job draws its block SD and its run SD from (log units, uniform).
BLOCK_SD, RUN_SD = (0.01, 0.05), (0.01, 0.06)
# The trend a power cell adds: 1% a block (log units, a slowing machine).
PER_BLOCK = math.log(0.99)


def job(rng: np.random.Generator, phi: float, blocks: int, per_block: float = 0.0,
        sds: tuple[float, float] | None = None) -> pd.DataFrame:
    """One job's runs frame: AR(1) ``phi`` block offsets over ``blocks`` blocks plus a
    trend of ``per_block`` log units a block; its block and run SDs ``sds``, else drawn."""
    # Drawn in this order, so that a seed gives the jobs it gave before ``sds``.
    block_sd = sds[0] if sds else rng.uniform(*BLOCK_SD)
    offsets = ar1(rng, blocks, phi, block_sd) + per_block * np.arange(blocks)
    run_sd = sds[1] if sds else rng.uniform(*RUN_SD)
    return runs_frame(rng, blocks // 2, offsets, math.log(SPEEDUP), run_sd)


def machine_flag(rng: np.random.Generator, phi: float, blocks: int, earlier: int,
                 per_block: float = 0.0) -> Drift:
    """``drift`` of one job, with a trend of ``per_block``, against ``earlier`` steady jobs
    of its machine: the machine draws its block and run SDs once, and every job of it has
    the same AR(1) ``phi`` block noise."""
    sds = (rng.uniform(*BLOCK_SD), rng.uniform(*RUN_SD))
    before = [job(rng, phi, blocks, sds=sds) for _ in range(earlier)]
    return drift(job(rng, phi, blocks, per_block, sds), before)


def machine_flag_rate(phi: float, blocks: int, earlier: int, jobs: int, seed: int,
                      per_block: float = 0.0) -> float:
    """``flag_rate`` with each job tested against ``earlier`` jobs of its machine."""
    rng = np.random.default_rng(seed)
    return sum(machine_flag(rng, phi, blocks, earlier, per_block).flag
               for _ in range(jobs)) / jobs


def flag_rate(phi: float, blocks: int, jobs: int, seed: int, per_block: float = 0.0
              ) -> float:
    """The share of ``jobs`` jobs ``drift`` flags: false positives when ``per_block`` is 0,
    else the power for that trend."""
    rng = np.random.default_rng(seed)
    return sum(drift(job(rng, phi, blocks, per_block)).flag for _ in range(jobs)) / jobs
