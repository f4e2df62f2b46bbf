"""Predicting a drafter's speedup from its acceptance profile and the engine cost curve
(``farm.stats.prediction.predict_speedup``): exact on noiseless inputs, picks the best
draft length a constructed profile makes best, and a simulation with a fixed seed that
measures the coverage of its interval (docs/statistics.md, "farm recommend"): 4,000
predictions per cell.

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import numpy as np
import pytest

from farm.stats.curve import cost_curve
from farm.stats.prediction import Profile, acceptance_length, predict_speedup

TRIALS = 4000


def _profile(rates: list[float], runs: int = 20, drafts: int = 100,
             plain: int = 0) -> Profile:
    accepted = np.array([[rate * drafts for rate in rates]] * runs)
    return Profile(np.full(runs, float(drafts)), accepted, np.full(runs, float(plain)))


def _line(k: int, cost: float) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.linspace(1.0, k + 1.0, 5)
    return lengths, lengths / cost


def test_acceptance_length_sums_the_positions_within_the_draft_length() -> None:
    profile = _profile([0.9, 0.6, 0.3])
    assert acceptance_length(profile, 2)[0] == pytest.approx(2.5)
    assert acceptance_length(profile, 3)[0] == pytest.approx(2.8)
    # Beyond the measured positions: geometric, ratio 0.3 / 0.6.
    assert acceptance_length(profile, 4)[0] == pytest.approx(2.95)


def test_a_noiseless_prediction_is_the_curve_at_the_drafters_length() -> None:
    lengths, speedups = _line(3, 1.6)
    curve = cost_curve(3, lengths, speedups, np.full(5, 1e-6), [6] * 5)
    found = predict_speedup(_profile([0.9, 0.6, 0.3]), curve)
    assert found.length == pytest.approx(2.8) and found.speedup == pytest.approx(2.8 / 1.6)
    assert found.extrapolated == ""
    # Half the steps plain (an n-gram lookup that found nothing): tokens 1.9, time 1.375.
    half = _profile([0.9, 0.6, 0.3], plain=100)
    assert predict_speedup(half, curve).speedup == pytest.approx(1.9 / (0.5 * 1.6 + 0.5))


def test_extrapolation_is_flagged() -> None:
    lengths, speedups = _line(4, 1.6)
    curve = cost_curve(4, lengths[:3], speedups[:3], np.full(3, 0.01), [6] * 3)
    found = predict_speedup(_profile([0.95, 0.9]), curve)
    assert "beyond position 2" in found.extrapolated and "outside the curve" in found.extrapolated


def test_the_best_draft_length_is_the_one_the_profile_and_costs_make_best() -> None:
    """Acceptance falls fast after position 2 and each drafted token costs 0.3 of a
    plain step: n-max 2 gives the most, n-max 4 the least."""
    profile = _profile([0.9, 0.8, 0.1, 0.05])
    predictions = {}
    for k in (1, 2, 3, 4):
        lengths, speedups = _line(k, 1.0 + 0.3 * k)
        curve = cost_curve(k, lengths, speedups, np.full(5, 0.005), [6] * 5)
        predictions[k] = predict_speedup(profile, curve).speedup
    assert max(predictions, key=lambda k: predictions[k]) == 2
    assert min(predictions, key=lambda k: predictions[k]) == 4


@pytest.mark.parametrize(("points", "runs", "share"), [(5, 24, 1.0), (4, 12, 1.0),
                                                       (6, 24, 0.6)])
def test_the_prediction_interval_covers_the_true_speedup(points: int, runs: int,
                                                          share: float) -> None:
    """An engine with step cost 1.4 at k = 3; a drafter whose runs differ in acceptance (each
    run's rates scaled by a draw, so runs are clusters); the curve from ``points`` noisy
    synthetic jobs. The 95% interval covers the true speedup within [0.93, 0.97]."""
    rng = np.random.default_rng(1000 * points + runs)
    k, cost, rates = 3, 1.4, np.array([0.8, 0.6, 0.4])
    lengths = np.linspace(1.0, 4.0, points)
    true_length = 1.0 + rates.sum()
    truth = (share * true_length + 1 - share) / (share * cost + 1 - share)
    covered = 0
    for _ in range(TRIALS):
        observed = lengths / cost * np.exp(rng.normal(0.0, 0.02, points))
        ses = 0.02 * np.sqrt(rng.chisquare(6, points) / 6)
        curve = cost_curve(k, lengths, observed, ses, [6] * points)
        drafts = rng.integers(40, 80, runs).astype(float)
        scale = np.clip(rng.normal(1.0, 0.15, runs), 0.3, 1.25)
        accepted = np.array([rng.binomial(int(d), np.clip(rates * s, 0, 1))
                             for d, s in zip(drafts, scale, strict=True)], dtype=float)
        plain = drafts * (1 - share) / share
        found = predict_speedup(Profile(drafts, accepted, plain), curve)
        covered += found.low <= truth <= found.high
    rate = covered / TRIALS
    print(f"\n{points} curve points, {runs} runs, draft share {share}: covered {rate:.3f}")
    assert 0.93 <= rate <= 0.97
