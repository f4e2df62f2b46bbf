"""A campaign's many rows, tested as ``farm compare`` tests its jobs: per-category and
grouped rows (``farm.results.groups``) called "faster" or "slower" against 1x at a false
discovery rate of 5% across a report's rows (Benjamini-Hochberg), and the best of m
variants with its simultaneous interval (Bonferroni: Benjamini-Yekutieli's
false-coverage-rate interval for one pick of m). Fixed-seed simulations measure both
error rates (docs/statistics.md, "A change").

Run with ``-s`` to see the figures.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from farm.results.groups import category_summary
from farm.stats.difference import FDR
from farm.stats.intervals import best_of_interval, log_interval

CAMPAIGNS = 300
VARIANTS, CATEGORIES, JOBS = 4, 5, 1
JOB_DF = 6


def _campaign(rng: np.random.Generator, true_logs: np.ndarray) -> pd.DataFrame:
    """Per job and category (``category_report``'s rows): ``JOBS`` jobs of each of
    ``VARIANTS`` x ``CATEGORIES`` cells, each cell's true log speedup from ``true_logs``,
    a job's log estimate off it by its noise (SE 0.5-2%: intervals of ±1-5%), its
    standard error estimated on ``JOB_DF`` df."""
    cells = VARIANTS * CATEGORIES
    noise = rng.uniform(0.005, 0.02, (cells, JOBS))
    logs = true_logs[:, None] + rng.normal(0.0, 1.0, (cells, JOBS)) * noise
    ses = noise * np.sqrt(rng.chisquare(JOB_DF, (cells, JOBS)) / JOB_DF)
    cell = np.repeat(np.arange(cells), JOBS)
    return pd.DataFrame({"variant": [f"v{c // CATEGORIES}" for c in cell],
                         "category": [f"c{c % CATEGORIES}" for c in cell],
                         "estimate": np.exp(logs.ravel()), "log_se": ses.ravel(),
                         "df": JOB_DF})


def test_a_row_is_faster_slower_or_within_noise_with_its_q_value() -> None:
    rows = pd.DataFrame({"variant": ["v"] * 4, "category": ["a", "a", "b", "c"],
                         "estimate": [1.30, 1.32, 0.999, 0.80], "log_se": [0.01] * 4,
                         "df": [6] * 4})
    summary = category_summary(rows)
    assert list(summary["verdict"]) == ["faster", "within noise", "slower"]
    q_a, q_b = (float(q) for q in summary["q_value"].iloc[:2])
    assert q_a < FDR < q_b


@pytest.mark.parametrize("changed", [0, 10])
def test_per_category_verdicts_hold_the_false_discovery_rate_across_a_campaign(
        changed: int) -> None:
    """20 rows a campaign (4 variants x 5 categories, a job each); ``changed`` of them 5%
    faster, the rest no faster than 1x. The share of false calls among a campaign's calls
    averages at most 0.05 (BH); a row whose interval excludes 1, as before, called a false
    change in most all-null campaigns."""
    rng = np.random.default_rng(2400 + changed)
    cells = VARIANTS * CATEGORIES
    true_logs = np.zeros(cells)
    true_logs[:changed] = math.log(1.05)
    false_shares, found, unadjusted_any = [], 0, 0
    for _ in range(CAMPAIGNS):
        summary = category_summary(_campaign(rng, true_logs))
        index = (summary["variant"].str[1:].astype(int) * CATEGORIES
                 + summary["category"].str[1:].astype(int))
        real = index.to_numpy() < changed
        called = (summary["verdict"] != "within noise").to_numpy()
        false_shares.append((called & ~real).sum() / max(called.sum(), 1))
        found += int((called & real).sum())
        excludes_one = ((summary["low"] > 1) | (summary["high"] < 1)).to_numpy()
        unadjusted_any += bool((excludes_one & ~real).any())
    fdr = float(np.mean(false_shares))
    power = found / (CAMPAIGNS * changed) if changed else math.nan
    before = unadjusted_any / CAMPAIGNS
    print(f"\n{changed} of 20 rows 5% faster: FDR {fdr:.3f}, power {power:.3f}; "
          f"campaigns with a false row by its interval alone {before:.3f}")
    assert fdr <= FDR
    if changed == 0:
        assert before > 0.2  # what the adjustment is for
    else:
        assert power >= 0.5


@pytest.mark.parametrize("variants", [5, 20])
def test_the_best_of_equal_variants_is_called_faster_at_most_at_its_level(
        variants: int) -> None:
    """m variants, none faster than 1x: the best-looking one's simultaneous interval
    (Bonferroni, the false-coverage-rate interval for one selection of m) excludes 1 in at
    most 2.5% of campaigns (one side of a 95% interval) and covers its true speedup in at
    least 95%; its plain interval calls the winner faster far more often."""
    rng = np.random.default_rng(2500 + variants)
    campaigns = 2000
    faster = plain_faster = covered = 0
    for _ in range(campaigns):
        noise = rng.uniform(0.01, 0.05, variants)
        logs = rng.normal(0.0, 1.0, variants) * noise
        ses = noise * np.sqrt(rng.chisquare(JOB_DF, variants) / JOB_DF)
        best = int(np.argmax(logs))
        low, high = best_of_interval(float(logs[best]), float(ses[best]), JOB_DF, variants)
        faster += low > 1.0
        covered += low <= 1.0 <= high
        plain_faster += log_interval(float(logs[best]), float(ses[best]), JOB_DF)[0] > 1.0
    rate, plain = faster / campaigns, plain_faster / campaigns
    print(f"\nbest of {variants} equal variants: called faster {rate:.3f} (plain interval "
          f"{plain:.3f}), covered {covered / campaigns:.3f}")
    assert rate <= 0.025 < plain
    assert covered / campaigns >= 0.95
