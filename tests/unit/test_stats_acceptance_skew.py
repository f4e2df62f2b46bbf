"""The acceptance interval when prompts differ (issue 38, item 5): coverage on the audit's
model (``tests.unit.simulate_acceptance``, fixed seeds), each band 0.93-0.97 widened by two
binomial standard deviations of the replicates run, and the degenerate cases. The figures
with more replicates, before and after: tests/bench/bench_acceptance.py.

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import math

import pytest

from farm.stats.acceptance import rate_interval
from tests.unit.simulate import binomial_sd
from tests.unit.simulate_acceptance import CELLS, coverage_cell

JOBS = 2000



@pytest.mark.parametrize(("sigma", "prompts"), CELLS)
def test_the_interval_covers_when_prompts_differ(sigma: float, prompts: int) -> None:
    """Before: 0.911-0.919 at prompt logit SD 1.0, misses mostly with the truth below."""
    cell = coverage_cell(JOBS, prompts, sigma, 5100 + 10 * prompts + int(10 * sigma))
    print(f"\nacceptance, {prompts} prompts, logit SD {sigma}: coverage {cell.coverage:.3f} "
          f"(truth below {cell.below:.3f}, above {cell.above:.3f}), "
          f"half-width {cell.half_width:.3f}")
    slack = 2 * binomial_sd(0.95, JOBS)
    assert 0.93 - slack <= cell.coverage <= 0.97 + slack


def test_without_two_prompts_there_is_no_interval() -> None:
    for accepted, drafted in (([], []), ([5], [10]), ([5, 3], [10, 0]),
                              ([5, math.nan], [10, 20])):
        assert all(math.isnan(bound) for bound in rate_interval(accepted, drafted))


@pytest.mark.parametrize(("accepted", "share"), [
    ([0, 0, 0], 0.0),  # nothing accepted
    ([10, 20, 40], 1.0),  # everything accepted
    ([3, 6, 12], 0.3),  # prompts that all accept the same share
])
def test_prompts_without_spread_give_a_zero_width_interval(accepted: list[int],
                                                           share: float) -> None:
    assert rate_interval(accepted, [10, 20, 40]) == (share, share)


def test_the_interval_stays_inside_0_1_and_holds_the_rate() -> None:
    for accepted, drafted in (([1, 9], [10, 10]), ([0, 9, 0], [10, 10, 10]),
                              ([1, 0, 0, 0], [1000] * 4), ([999, 1000, 1000], [1000] * 3)):
        low, high = rate_interval(accepted, drafted)
        rate = sum(accepted) / sum(drafted)
        assert 0.0 <= low <= rate <= high <= 1.0


def test_a_rare_low_prompt_lengthens_the_interval_below() -> None:
    """One prompt far below the others (residuals skewed low): the interval reaches further
    below the rate than above it; one far above, the other way round."""
    low, high = rate_interval([20, 60, 62, 64], [100] * 4)  # rate 0.515
    assert 0.515 - low > 2 * (high - 0.515) > 0
    low, high = rate_interval([36, 38, 40, 80], [100] * 4)  # rate 0.485
    assert high - 0.485 > 2 * (0.485 - low) > 0
