"""Simulated engine cost curves and predictions from them (the independent audit's cells,
issue 24), for ``tests/unit/test_cost_curve_shape.py`` and ``tests/bench/bench_cost_curve``:
synthetic-acceptance jobs on a known truth, a drafter's runs with known rates, and
``predict_speedup`` on the farm's own ``cost_curve``."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from farm.stats.curve import cost_curve
from farm.stats.prediction import Profile, predict_speedup

K = 3
Truth = Callable[[np.ndarray], np.ndarray]
# The speedup at acceptance length L: a line (step cost 1.4), step costs that grow with the
# accepted tokens, one that saturates, and a rollback that costs a partly accepted draft
# 0.15 step more (the audit's names).
TRUTHS: dict[str, Truth] = {
    "line": lambda length: length / 1.4,
    "quad0.02": lambda length: length / (1.3 + 0.02 * (length - 1) ** 2),
    "mild": lambda length: length / (1.3 + 0.05 * (length - 1) ** 2),
    "strong": lambda length: length / (1.2 + 0.10 * (length - 1) ** 2),
    "saturating": lambda length: 2.1 * (1 - np.exp(-(length - 0.2) / 1.6)),
    "rollback": lambda length: length / (1.6 + 0.15 * (length < K + 1)),
}


def noisy_points(rng: np.random.Generator, truth: np.ndarray, tau: float,
                 df: int) -> tuple[np.ndarray, np.ndarray]:
    """Synthetic jobs off the truth by their noise (2%, and tau), their standard errors
    estimated from ``df`` degrees of freedom."""
    size = truth.size
    observed = truth * np.exp(rng.normal(0.0, tau, size) + rng.normal(0.0, 0.02, size))
    return observed, 0.02 * np.sqrt(rng.chisquare(df, size) / df)


@dataclass(frozen=True)
class PredictionCell:
    """A cell's mean prediction over the truth less 1, its interval's coverage and the
    share of curves the lack-of-fit test made curved."""

    bias: float
    coverage: float
    curved: float


def prediction_cell(name: str, rates: list[float], points: int, runs: int, trials: int,
                    seed: int, job_df: int = 6) -> PredictionCell:
    """``trials`` predictions at draft length ``K`` for a drafter with ``rates`` (each run's
    rates scaled by a draw: runs differ) from curves of ``points`` jobs on truth ``name``."""
    rng = np.random.default_rng(seed)
    truth_of, rate = TRUTHS[name], np.asarray(rates)
    lengths = np.linspace(1.0, K + 1.0, points)
    scale = np.clip(np.random.default_rng(1).normal(1.0, 0.15, 200_000), 0.3, 1.25)
    true_length = 1.0 + float(sum(np.clip(r * scale, 0, 1).mean() for r in rate))
    truth = float(truth_of(np.array(true_length)))
    predicted, covered, curved = [], 0, 0
    for _ in range(trials):
        observed, ses = noisy_points(rng, truth_of(lengths), 0.0, job_df)
        curve = cost_curve(K, lengths, observed, ses, [job_df] * points)
        drafts = rng.integers(40, 80, runs).astype(float)
        scales = np.clip(rng.normal(1.0, 0.15, runs), 0.3, 1.25)
        accepted = np.array([rng.binomial(int(d), np.clip(rate * s, 0, 1))
                             for d, s in zip(drafts, scales, strict=True)], dtype=float)
        found = predict_speedup(Profile(drafts, accepted, np.zeros(runs)), curve)
        predicted.append(found.speedup)
        covered += found.low <= truth <= found.high
        curved += curve.curvature != 0.0
    return PredictionCell(float(np.mean(predicted)) / truth - 1.0, covered / trials,
                          curved / trials)
