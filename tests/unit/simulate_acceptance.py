"""Simulated acceptance counters of prompts that differ (issue 38, item 5), for
``tests/unit/test_stats_acceptance_skew.py`` and ``tests/bench/bench_acceptance.py``.

The independent audit's model (/work/shared/statsaudit2, sim3_accept.py): a job's prompts
are drawn from a population whose logit acceptance is logit 0.6 + N(0, sigma); each prompt
runs 30 times, each run's logit jittered by N(0, 0.1); a run generates 128 tokens with a
draft of 3, so it drafts ceil(127 / (1 + 3 p)) times (a prompt that accepts less drafts
more) and accepts Binomial(3 x drafts, p) tokens. The interval is given each prompt's runs
summed, as ``acceptance`` gives it; the truth is the population's E[accepted] /
E[drafted], what the ratio estimator targets.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from farm.stats.acceptance import rate_interval
from farm.stats.frame import Floats

DRAFT = 3
TOKENS = 128
RUNS = 30
RUN_SD = 0.1
CENTRE = math.log(0.6 / 0.4)

# The cells the interval is held to: prompt logit SD x prompts a job.
CELLS = [(sigma, prompts) for sigma in (0.5, 1.0) for prompts in (3, 4, 8)]


def _expit(x: Floats) -> Floats:
    return 1.0 / (1.0 + np.exp(-x))


def _drafts(p: Floats) -> Floats:
    """Drafts a run makes at acceptance ``p``."""
    return np.ceil((TOKENS - 1) / (1.0 + DRAFT * p))


def truth(sigma: float) -> float:
    """The population's E[accepted] / E[drafted] at prompt logit SD ``sigma``: a run's
    logit is normal (prompt and run effects add), integrated on a fine grid."""
    z = np.linspace(-9.0, 9.0, 180_001)
    density = np.exp(-z * z / 2)
    p = _expit(CENTRE + math.hypot(sigma, RUN_SD) * z)
    drafted = density * _drafts(p)
    return float(np.sum(drafted * p) / np.sum(drafted))


def prompt_sums(rng: np.random.Generator, jobs: int, prompts: int, sigma: float
                ) -> tuple[Floats, Floats]:
    """Accepted and drafted tokens of each job's prompts (``jobs`` x ``prompts``), each
    prompt's runs summed."""
    logit = CENTRE + rng.normal(0.0, sigma, (jobs, prompts, 1))
    p = _expit(logit + rng.normal(0.0, RUN_SD, (jobs, prompts, RUNS)))
    drafted = DRAFT * _drafts(p).astype(np.int64)
    accepted = rng.binomial(drafted, p)
    return accepted.sum(axis=2).astype(float), drafted.sum(axis=2).astype(float)


@dataclass(frozen=True)
class Cell:
    """How often ``rate_interval`` covered the truth in one cell, the shares of jobs whose
    interval lay wholly above it (``below``: the truth below the interval) and wholly below
    it (``above``), and the median half-width (in acceptance rate)."""

    coverage: float
    below: float
    above: float
    half_width: float


def coverage_cell(jobs: int, prompts: int, sigma: float, seed: int) -> Cell:
    """``rate_interval`` over ``jobs`` simulated jobs of ``prompts`` prompts."""
    accepted, drafted = prompt_sums(np.random.default_rng(seed), jobs, prompts, sigma)
    target = truth(sigma)
    bounds = np.array([rate_interval(a, d) for a, d in zip(accepted, drafted, strict=True)])
    below = float(np.mean(target < bounds[:, 0]))
    above = float(np.mean(target > bounds[:, 1]))
    return Cell(1.0 - below - above, below, above,
                float(np.median(bounds[:, 1] - bounds[:, 0])) / 2)
