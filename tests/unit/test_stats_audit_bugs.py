"""The bugs the statistics audit reproduced on the farm's own functions (issue 24), and
recommend's verdict on an interval: each a test that failed on the code before the fix."""

from __future__ import annotations

import math

import numpy as np

from farm.results.summarize import summarize
from farm.stats.curve import cost_curve
from farm.stats.design import Design
from farm.stats.pooling import pool_jobs
from farm.stats.prediction import INSUFFICIENT, Profile, predict_speedup
from farm.stats.speedup import ZERO_SPREAD, estimate
from farm.summary import RunFacts
from tests.unit.test_stats import make_runs


def test_a_zero_variance_second_stage_is_flagged_never_a_zero_width_interval() -> None:
    # The first stage varies; the second stage's pairs are identical (a cached or rounded
    # result). Before: a zero-width interval, with ``degenerate`` not raised.
    values = [0.25, 0.31, 0.28, 0.22] + [0.27] * 8
    found = estimate(values, [1, -1] * 6, Design(4, 12, 0.03))
    assert found.method == ZERO_SPREAD
    assert math.isnan(found.speedup.low) and math.isnan(found.speedup.high)
    assert found.speedup.estimate == math.exp(0.27)

    def speed(arm: str, block: int, prompt: str, rep: int) -> float:
        # Noisy first stage (pairs 0-3), then identical blocks.
        wobble = 1.0 + 0.03 * math.sin(block * 1.7) if block < 8 else 1.0
        return 10.0 * wobble * (1.3 if arm == "variant" else 1.0)

    summary = summarize(make_runs(speed, pairs=12), RunFacts(), kind="variant",
                        design=Design(4, 12, 0.03))
    assert summary.degenerate is True and summary.ci_low is None


def test_two_alike_jobs_pool_to_an_interval_no_narrower_than_their_errors() -> None:
    # Before: [1.2214, 1.2214], HKSJ's scale (zero here) untruncated.
    pooled = pool_jobs([0.2, 0.2], [0.05, 0.05], [4, 4])
    fixed_effect = 1.96 * 0.05 / math.sqrt(2)
    assert math.log(pooled.high / pooled.low) / 2 > fixed_effect
    # The audit's k = 2 simulation: narrower than the fixed-effect z interval in 10.7% of
    # groups of alike jobs before; never now (the scale is at least 1, and t_1 > z).
    rng = np.random.default_rng(0)
    narrower = 0
    for _ in range(1000):
        se = 0.02 * np.sqrt(rng.chisquare(4, 2) / 4)
        found = pool_jobs(0.2 + rng.normal(0, 0.02, 2), se, [4, 4])
        narrower += math.log(found.high / found.low) / 2 < 1.96 / math.sqrt(np.sum(1 / se**2))
    assert narrower == 0


def test_the_cost_curve_of_an_exact_line_keeps_its_points_errors() -> None:
    lengths = np.linspace(1.0, 4.0, 5)
    curve = cost_curve(3, lengths, lengths / 1.4, np.full(5, 0.02), [6] * 5)
    value, low, high = curve.speedup(2.5)
    # Knapp-Hartung truncated: at least the interval the points' own 2% errors give.
    assert (high - low) / 2 / value > 0.02 / math.sqrt(5)


def test_a_prediction_from_one_prompt_says_insufficient_data_never_a_point() -> None:
    lengths = np.linspace(1, 4, 5)
    curve = cost_curve(3, lengths, lengths / 1.4, np.full(5, 0.02), [6] * 5)
    one = predict_speedup(Profile(np.array([60.0]), np.array([[48.0, 36.0, 24.0]]),
                                  np.array([0.0])), curve)
    assert math.isnan(one.speedup) and math.isnan(one.low) and INSUFFICIENT in one.extrapolated
    two = predict_speedup(Profile(np.full(2, 60.0), np.array([[30.0, 20, 10], [66, 52, 38]]),
                                  np.zeros(2)), curve)
    assert two.low < two.speedup < two.high and two.extrapolated == ""


def test_recommend_speculates_only_when_the_interval_is_above_one() -> None:
    # Before: "speculate" on a point estimate above 1, whatever its interval.
    import pandas as pd

    from farm.results.recommend import NO_CLEAR_GAIN, NO_SPECULATION, recommendations

    def candidate(category: str, speedup: float, low: float, rank: int) -> dict[str, object]:
        return {"gpu_class": "cpu", "model": "m", "build": "b", "category": category,
                "spec_type": "draft-mtp", "setting": "spec-type=draft-mtp",
                "draft_n_max": rank + 1, "speedup": speedup, "low": low,
                "high": speedup * 1.2, "length": 2.0, "rates": [0.8], "draft_share": 1.0,
                "break_even": 1.5, "step_cost": 1.4, "extrapolated": "", "rank": rank}

    chosen = recommendations(pd.DataFrame([
        candidate("clear", 1.3, 1.1, 1), candidate("clear", 1.2, 1.05, 2),
        candidate("unclear", 1.1, 0.95, 1), candidate("slower", 0.9, 0.8, 1),
        candidate("unknown", 1.2, math.nan, 1),
        candidate("one prompt", math.nan, math.nan, 1)])).set_index("category")
    assert chosen.loc["clear", "recommended"] == "spec-type=draft-mtp spec-draft-n-max=2"
    assert chosen.loc["unclear", "recommended"] == NO_CLEAR_GAIN
    assert chosen.loc["unknown", "recommended"] == NO_CLEAR_GAIN
    assert chosen.loc["slower", "recommended"] == NO_SPECULATION
    assert chosen.loc["one prompt", "recommended"] == INSUFFICIENT
    assert "slower" not in str(chosen.loc["one prompt", "why"])
    assert chosen.loc["unclear", "runner_up"] == "spec-type=draft-mtp spec-draft-n-max=2"


def test_a_machine_that_does_not_move_has_no_drift() -> None:
    # The audit's probe 4: identical tok/s in every block; the GLS fit's residuals are
    # rounding (1e-16), not noise, and must not be tested.
    from farm.stats.drift import drift
    from tests.unit.test_stats import constant

    found = drift(make_runs(constant(100.0, 130.0), pairs=8))
    assert found.flag is False and math.isnan(found.low)
