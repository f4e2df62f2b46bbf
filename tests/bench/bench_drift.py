"""Drift-flag benchmark (a script, not a test): false positives and power of
``farm.stats.drift.drift`` on the second audit's generator (``tests.unit.simulate_drift``),
AR(1) 0 / 0.5 / 0.8 block offsets x 16 / 24 blocks, with no trend and with a 1%-a-block
trend, beside the figures for the code before issue 38.

Prints one row per cell: false positives before and now, power before and now, each now
with its binomial standard error. About 4 minutes for 2,000 replicates on one core.

    nice -n 19 .venv/bin/python -m tests.bench.bench_drift [--jobs 2000]    (from the checkout)

With ``--earlier K`` each job is tested against K steady earlier jobs of its machine (the
same block and run SDs and block correlation; ``farm.stats.drift`` makes the test against
them from ``EARLIER_MIN``), as a job on a machine with a history is (about 12 minutes at
K = 20 for 2,000 replicates).

With ``--envelope`` it prints, at AR(1) 0.8, what a valid test can reach: the power of GLS
at the true correlation with its critical value set to exactly 5% in that cell (a test told
rho), and of the test before issue 38 held to 5% the same way (about half a minute).

With ``--table`` it instead computes ``farm.stats.drift.CRITICAL``, seeded: for each number
of blocks, the largest 95% quantile of the likelihood ratio's root (``likelihood_ratio``, the
counterbalanced design) over steady machines whose blocks are AR(1) 0.5-0.8 plus independent
noise of 0-50% of the variance, 50,000 series each (about 3 minutes).
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from farm.stats.drift import block_values, fit_ar1, likelihood_ratio
from farm.stats.frame import Floats
from tests.unit.simulate import ar1_rows, plus_minus
from tests.unit.simulate_drift import PER_BLOCK, flag_rate, job, machine_flag_rate

CELLS = [(phi, blocks) for blocks in (16, 24) for phi in (0.0, 0.5, 0.8)]
# Measured on the code before issue 38 (GLS at the residuals' bias-corrected rho, at least
# 0.4, t on blocks - 5 df), 2,000 jobs a cell, these seeds: (false positives, power).
BEFORE = {(0.0, 16): ("0.003", "0.840"), (0.5, 16): ("0.034", "0.796"),
          (0.8, 16): ("0.099", "0.824"), (0.0, 24): ("0.002", "0.999"),
          (0.5, 24): ("0.031", "0.982"), (0.8, 24): ("0.114", "0.952")}


TABLE_BLOCKS = (6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96)
TABLE_CORRELATIONS = (0.5, 0.6, 0.7, 0.8)
TABLE_WHITE = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5)


def counterbalanced_design(blocks: int) -> Floats:
    """The drift fit's columns for ``blocks`` blocks of AB/BA pairs: intercept, arm, a
    pair's first block, block index."""
    index = np.arange(blocks)
    first = (index % 2 == 0).astype(float)
    arm = ((index // 2 + index % 2) % 2).astype(float)
    return np.column_stack([np.ones(blocks), arm, first, index.astype(float)])


def largest_quantile(blocks: int, series: int, seed: int) -> float:
    """The largest 95% quantile of the likelihood ratio's root over the table's steady
    machines."""
    rng = np.random.default_rng(seed)
    design = counterbalanced_design(blocks)
    largest = 0.0
    for phi in TABLE_CORRELATIONS:
        for white in TABLE_WHITE:
            values = (math.sqrt(1 - white) * ar1_rows(rng, series, blocks, phi)
                      + math.sqrt(white) * rng.normal(size=(series, blocks)))
            root = np.concatenate([likelihood_ratio(design, chunk)
                                   for chunk in np.array_split(values, series // 1000)])
            largest = max(largest, float(np.quantile(root, 0.95)))
    return largest


def table(series: int) -> None:
    """Print ``CRITICAL``: the critical root for each number of blocks."""
    found = [(blocks, largest_quantile(blocks, series, 4000 + blocks))
             for blocks in TABLE_BLOCKS]
    print("CRITICAL = (" + ", ".join(f"({b}, {c:.2f})" for b, c in found) + ")")


def job_values(blocks: int, phi: float, jobs: int, seed: int, per_block: float) -> Floats:
    """``jobs`` jobs' block values as ``drift`` makes them (``block_values``), one row a
    job."""
    rng = np.random.default_rng(seed)
    return np.array([block_values(job(rng, phi, blocks, per_block)).to_numpy()
                     for _ in range(jobs)])


def gls_t(design: Floats, values: Floats, rho: Floats) -> Floats:
    """|t| of the slope, each row by GLS at its own AR(1) correlation (``fit_ar1``)."""
    found = [fit_ar1(design, value[None, :], np.array([correlation]))
             for value, correlation in zip(values, rho, strict=True)]
    return np.array([abs(coefficients[0, -1]) / error[0] for _, coefficients, error in found])


def old_correlation(design: Floats, values: Floats) -> Floats:
    """The correlation the test before issue 38 used: the least-squares residuals' lag-1
    correlation plus 2 (1 + 3 r) / n, clipped to [0.4, 0.95]."""
    found, *_ = np.linalg.lstsq(design, values.T, rcond=None)
    residual = values - (design @ found).T
    r = (residual[:, 1:] * residual[:, :-1]).sum(1) / (residual * residual).sum(1)
    correlation: Floats = np.clip(r + 2 * (1 + 3 * r) / values.shape[1], 0.4, 0.95)
    return correlation


def envelope(jobs: int) -> None:
    """Print the power a test told rho has at AR(1) 0.8, and the old test's held to 5%."""
    print(f"AR(1) 0.8, a 1%-a-block trend ({jobs} jobs a cell): power at exactly 5% in the cell")
    for blocks in (16, 24):
        design = counterbalanced_design(blocks)
        steady = job_values(blocks, 0.8, jobs, 5000 + blocks, 0.0)
        trend = job_values(blocks, 0.8, jobs, 5100 + blocks, PER_BLOCK)
        told = (np.full(jobs, 0.8), np.full(jobs, 0.8))
        before = (old_correlation(design, steady), old_correlation(design, trend))
        for name, (at_steady, at_trend) in (("told rho", told), ("before issue 38", before)):
            critical = float(np.quantile(gls_t(design, steady, at_steady), 0.95))
            power = float(np.mean(gls_t(design, trend, at_trend) > critical))
            print(f"{blocks:>3} blocks, {name:<16} critical {critical:.2f} power {power:.3f} "
                  f"{plus_minus(power, jobs)}", flush=True)


def main() -> None:
    """Run every cell and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--jobs", type=int, default=2000, help="replicates per cell")
    parser.add_argument("--table", action="store_true",
                        help="compute farm.stats.drift.CRITICAL instead (50,000 series)")
    parser.add_argument("--envelope", action="store_true",
                        help="print what a valid test can reach at AR(1) 0.8 instead")
    parser.add_argument("--earlier", type=int, default=0,
                        help="test each job against this many earlier jobs of its machine")
    args = parser.parse_args()
    if args.envelope:
        envelope(args.jobs)
        return
    if args.table:
        table(50_000)
        return
    jobs = args.jobs
    began = time.monotonic()
    print(f"drift flag, steady machine with AR(1) blocks ({jobs} jobs a cell, each tested "
          f"against {args.earlier} earlier jobs of its machine); power for a "
          f"{-math.expm1(PER_BLOCK):.0%}-a-block trend")
    print(f"{'AR(1)':>5} {'blocks':>6} {'FP before':>9} {'FP now':>13} "
          f"{'power before':>12} {'power now':>13}")
    for seed, (phi, blocks) in enumerate(CELLS):
        if args.earlier:
            false = machine_flag_rate(phi, blocks, args.earlier, jobs, 3800 + seed)
            power = machine_flag_rate(phi, blocks, args.earlier, jobs, 3900 + seed,
                                      per_block=PER_BLOCK)
        else:
            false = flag_rate(phi, blocks, jobs, 3800 + seed)
            power = flag_rate(phi, blocks, jobs, 3900 + seed, per_block=PER_BLOCK)
        before = BEFORE.get((phi, blocks), ("-", "-"))
        print(f"{phi:>5} {blocks:>6} {before[0]:>9} {false:>6.3f} {plus_minus(false, jobs):>6} "
              f"{before[1]:>12} {power:>6.3f} {plus_minus(power, jobs):>6}", flush=True)
    print(f"\n{time.monotonic() - began:.0f} s")


if __name__ == "__main__":
    main()
