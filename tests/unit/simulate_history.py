"""Simulated histories for the change finding (``farm.stats.changes``): jobs whose series
are measured on a run of builds, each build's value the mean of its blocks (server
sessions), with or without a change planted at one build in some series.

The figures in docs/history.md come from ``history_cell`` (``python -m
tests.unit.simulate_history`` prints them with more rounds).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.changes import find_changes
from farm.stats.history import mean_estimate

# A job's series (farm.stats.history) and the noise of their block values: tok/s and the
# speedup about 3% block to block on a shared CPU, acceptance 2%, the timers 5%.
SERIES = {"speedup": 0.03, "baseline_tok_s": 0.03, "variant_tok_s": 0.03,
          "acceptance_1": 0.02, "acceptance_2": 0.02, "mean_accepted_length": 0.02,
          "draft_ms_per_token": 0.05, "verify_ms_per_token": 0.05}


@dataclass(frozen=True)
class Cell:
    """Over the rounds: the share of histories with any call where nothing changed (false
    alarms), the share of null tests called, the share of planted changes called (power),
    and the false discovery rate (the mean over histories of false calls / calls, 0 for a
    history without calls: what Benjamini-Hochberg holds at 5%)."""

    false_alarm_histories: float
    false_alarm_tests: float
    power: float
    false_discoveries: float


def _history(rng: np.random.Generator, builds: int, blocks: int,
             planted: dict[str, float], at: int) -> pd.DataFrame:
    rows = []
    for series, noise in SERIES.items():
        for order in range(builds):
            level = planted.get(series, 1.0) if order >= at else 1.0
            values = level * np.exp(rng.normal(0.0, noise, blocks))
            estimate = mean_estimate(values.tolist())
            rows.append({"key": "job", "series": series, "order": order, "build": str(order),
                         "value": estimate.value, "log_se": estimate.log_se,
                         "df": estimate.df})
    return pd.DataFrame(rows)


def history_cell(rounds: int, seed: int, planted: dict[str, float] | None = None,
                 builds: int = 4, blocks: int = 4) -> Cell:
    """``rounds`` histories of one job's ``SERIES`` over ``builds`` builds, ``blocks`` blocks
    a build; ``planted`` series change by their factor at the middle build."""
    rng = np.random.default_rng(seed)
    planted = planted or {}
    at = builds // 2
    alarmed = null_tests = null_calls = found = 0
    proportions = 0.0
    for _ in range(rounds):
        changes = find_changes(_history(rng, builds, blocks, planted, at))
        called = changes["verdict"].isin(["regression", "improvement"])
        real = changes["series"].isin(list(planted)) & (changes["order_b"] == at)
        null_tests += int((~real).sum())
        null_calls += int((called & ~real).sum())
        found += int((called & real).sum())
        proportions += int((called & ~real).sum()) / max(int(called.sum()), 1)
        alarmed += int(bool((called & ~real).any()))
    return Cell(alarmed / rounds, null_calls / max(null_tests, 1),
                found / max(rounds * len(planted), 1), proportions / rounds)


if __name__ == "__main__":
    ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    for BLOCKS in (4, 8):
        print(f"{BLOCKS} blocks a build, null:", history_cell(ROUNDS, 26001, blocks=BLOCKS))
        for factor in (1.10, 1.18, 1.30):
            print(f"  verify +{factor - 1:.0%}:", history_cell(
                ROUNDS, 26002, {"verify_ms_per_token": factor}, blocks=BLOCKS))
        print("  variant tok/s -17%, speedup -10%:", history_cell(
            ROUNDS, 26003, {"variant_tok_s": 0.83, "speedup": 0.90}, blocks=BLOCKS))
