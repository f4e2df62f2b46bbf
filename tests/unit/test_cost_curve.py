"""The engine cost curve (``farm.stats.curve.cost_curve``): exact on a noiseless line, and a
simulation with a fixed seed that measures the coverage of its intervals
(docs/statistics.md, "Engine cost curve"): 4,000 simulated curves per cell.

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from farm.stats.curve import cost_curve

CURVES = 4000


def test_a_noiseless_line_through_the_origin_gives_its_step_cost_and_break_even() -> None:
    # Step cost 1.6 plain decode steps: speedup L / 1.6, break-even at L = 1.6.
    lengths = np.array([1.0, 1.5, 2.0, 2.5, 3.0])
    curve = cost_curve(2, lengths, lengths / 1.6, np.full(5, 0.01), [6] * 5)
    assert curve.intercept == pytest.approx(0.0, abs=1e-9)
    assert curve.slope == pytest.approx(1 / 1.6)
    assert curve.step_cost()[0] == pytest.approx(1.6)
    estimate, low, high = curve.break_even()
    assert estimate == pytest.approx(1.6)
    # Knapp-Hartung's scale truncated at 1: a line that fits exactly still carries its
    # points' own errors (1%), never a zero-width interval.
    assert low < 1.6 < high and high - low > 0.01
    assert curve.lengths == (1.0, 3.0) and curve.points == 5 and curve.df == 3


def test_too_few_points_give_no_interval_and_a_falling_line_no_break_even() -> None:
    two = cost_curve(3, [1.0, 4.0], [0.5, 1.5], [0.02, 0.02], [6, 6])
    assert two.df == 0 and math.isnan(two.speedup(2.0)[1])
    falling = cost_curve(3, [1.0, 2.0, 3.0], [0.82, 0.8, 0.78], [0.02, 0.02, 0.02], [6] * 3)
    assert math.isnan(falling.break_even()[0])
    one = cost_curve(3, [2.0], [1.1], [0.02], [6])
    assert one.points == 1 and math.isnan(one.slope)


def _simulate(rng: np.random.Generator, lengths: np.ndarray, truth: np.ndarray,
              job_se: float, tau: float, df: int) -> tuple[np.ndarray, np.ndarray]:
    """Each point one job: its log speedup off the truth by the job's noise (and tau), its
    reported standard error estimated from ``df`` degrees of freedom."""
    log_true = np.log(truth) + rng.normal(0.0, tau, lengths.size)
    observed = np.exp(log_true + rng.normal(0.0, job_se, lengths.size))
    reported = job_se * np.sqrt(rng.chisquare(df, lengths.size) / df)
    return observed, reported


@pytest.mark.parametrize(("points", "tau"), [(4, 0.0), (6, 0.0), (6, 0.02), (8, 0.01)])
def test_speedup_and_break_even_intervals_cover(points: int, tau: float) -> None:
    """A line through the origin with step cost 1.6 (k = 3): the speedup interval at the
    middle length and the break-even interval cover within [0.93, 0.97]."""
    rng = np.random.default_rng(20261201 + points)
    lengths = np.linspace(1.0, 4.0, points)
    truth = lengths / 1.6
    middle = 2.5
    covered_speedup = covered_break_even = 0
    for _ in range(CURVES):
        speedups, ses = _simulate(rng, lengths, truth, job_se=0.02, tau=tau, df=6)
        curve = cost_curve(3, lengths, speedups, ses, [6] * points)
        _, low, high = curve.speedup(middle)
        covered_speedup += low <= middle / 1.6 <= high
        _, low, high = curve.break_even()
        covered_break_even += low <= 1.6 <= high
    speedup_rate, break_even_rate = covered_speedup / CURVES, covered_break_even / CURVES
    print(f"\n{points} points, tau {tau}: speedup at L={middle} covers {speedup_rate:.3f}, "
          f"break-even covers {break_even_rate:.3f}")
    # Knapp-Hartung's scale truncated at 1 is conservative where the points' own errors
    # dominate (no tau, few points: up to 1.0); 4,000 curves, a rate's SD 0.0035.
    upper = 1.0 if tau == 0.0 else 0.99
    assert 0.93 <= speedup_rate <= upper
    assert 0.93 <= break_even_rate <= upper


def test_a_rollback_bend_is_absorbed_by_the_intercept_and_tau() -> None:
    """A recurrent model replays partly accepted drafts: the truth is not a line through
    the origin. tau absorbs what the line leaves, so the interval of the best line's
    speedup at the middle is conservative (>= 0.93), not too narrow."""
    rng = np.random.default_rng(7)
    lengths = np.linspace(1.0, 4.0, 6)
    truth = lengths / (1.6 + 0.15 * (lengths < 4.0))  # a rollback costs 0.15 step
    fit_truth = np.polyfit(lengths, truth, 1)
    covered = 0
    for _ in range(CURVES):
        speedups, ses = _simulate(rng, lengths, truth, job_se=0.02, tau=0.0, df=6)
        _, low, high = cost_curve(3, lengths, speedups, ses, [6] * 6).speedup(2.5)
        covered += low <= float(np.polyval(fit_truth, 2.5)) <= high
    rate = covered / CURVES
    print(f"\nbent truth: the best line's speedup at L=2.5 covered {rate:.3f}")
    assert rate >= 0.93
