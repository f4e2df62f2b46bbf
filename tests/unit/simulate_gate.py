"""Simulated nightly histories for the regression gate and the history's calls
(``farm.stats.changes``): one job's 8 series (docs/history.md) over B builds, each build's
value the mean of its blocks as ``farm.stats.history.mean_estimate`` makes it, optionally
a machine that drifts between nights (a shift of SD ``drift`` on the log scale, per build,
on the tok/s and the timers: what one job's pairing does not remove), and a -10% speedup
at the newest build. The issue's cells (the audit's, /work/shared/statsaudit2/sim4): value
SE 1.06% (8 blocks at 3%) and 3% (7 blocks at 7.9%), B = 4, 30, 100, 365.

``python -m tests.bench.bench_gate`` prints the figures docs/history.md quotes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from farm.stats.changes import find_changes, gate

SERIES = ("speedup", "baseline_tok_s", "variant_tok_s", "acceptance_1", "acceptance_2",
          "mean_accepted_length", "draft_ms_per_token", "verify_ms_per_token")
# The series a machine's drift between jobs moves: speeds and timers, not the speedup (both
# arms in one job) or acceptance (the same text).
DRIFTING = np.array([name in ("baseline_tok_s", "variant_tok_s", "draft_ms_per_token",
                              "verify_ms_per_token") for name in SERIES])
# (blocks a build, SD of a block's log value): value SE 1.06%, and 3%.
PRECISE, NOISY = (8, 0.03), (7, 0.079)


@dataclass(frozen=True)
class GateCell:
    """Over the histories: the share where the gate called the planted -10% speedup a
    regression (power), and the share where the gate failed with nothing planted (false
    alarms: any series called a regression at the newest build)."""

    power: float
    false_alarms: float


def history(rng: np.random.Generator, builds: int, blocks: int, sd: float,
            drift: float = 0.0) -> pd.DataFrame:
    """One job's points (``farm.stats.changes.POINT_COLUMNS``) on ``builds`` builds tracked
    in commit order; nothing changes between them."""
    values = np.exp(rng.normal(0.0, sd, (len(SERIES), builds, blocks)))
    if drift > 0:
        shift = rng.normal(0.0, drift, (len(SERIES), builds, 1))
        values = values * np.exp(np.where(DRIFTING[:, None, None], shift, 0.0))
    mean = values.mean(axis=2)
    # farm.stats.history.mean_estimate: log SE = sd / (mean sqrt(n)), n - 1 df.
    log_se = values.std(axis=2, ddof=1) / (mean * math.sqrt(blocks))
    points = _layout(builds, blocks).copy()
    points["value"] = mean.ravel()
    points["log_se"] = log_se.ravel()
    return points


@lru_cache(maxsize=16)
def _layout(builds: int, blocks: int) -> pd.DataFrame:
    """``history``'s points but their values and log SEs (0): the same for every history
    of ``builds`` builds and ``blocks`` blocks a build (copy it)."""
    return pd.DataFrame({"key": "job", "series": np.repeat(SERIES, builds),
                         "order": np.tile(np.arange(builds), len(SERIES)),
                         "build": np.tile([f"b{i}" for i in range(builds)], len(SERIES)),
                         "value": 0.0, "log_se": 0.0, "df": float(blocks - 1)})


def regressed(points: pd.DataFrame, factor: float = 0.9) -> pd.DataFrame:
    """The same history with the speedup's newest value times ``factor`` (its log SE is
    relative: unchanged)."""
    newest = (points["series"] == "speedup") & (points["order"] == points["order"].max())
    return points.assign(value=points["value"].where(~newest, points["value"] * factor))


def _newest_calls(points: pd.DataFrame) -> pd.DataFrame:
    """The gate's rows (``farm.stats.changes.gate``, what ``--fail-on-regression`` reads)
    and their verdicts."""
    rows = gate(points)
    rows["verdict"] = rows["gate_verdict"]
    return rows


def _running_calls(points: pd.DataFrame) -> pd.DataFrame:
    """The history's own calls (``find_changes``' ``verdict``, LORD++ over the tracked
    transitions) of the newest transition."""
    changes = find_changes(points)
    newest: pd.DataFrame = changes[changes["order_b"] == changes["order_b"].max()]
    return newest


def _cell(calls: Callable[[pd.DataFrame], pd.DataFrame], histories: int, seed: int,
          builds: int, noise: tuple[int, int | float], drift: float) -> GateCell:
    rng = np.random.default_rng(seed)
    power = alarms = 0
    blocks, sd = int(noise[0]), float(noise[1])
    for _ in range(histories):
        points = history(rng, builds, blocks, sd, drift)
        alarms += int((calls(points)["verdict"] == "regression").any())
        found = calls(regressed(points))
        power += int(((found["series"] == "speedup") & (found["verdict"] == "regression")).any())
    return GateCell(power / histories, alarms / histories)


def gate_cell(histories: int, seed: int, builds: int, noise: tuple[int, int | float],
              drift: float = 0.0) -> GateCell:
    """The gate on ``histories`` histories with and without the planted regression."""
    return _cell(_newest_calls, histories, seed, builds, noise, drift)


def display_cell(histories: int, seed: int, builds: int, noise: tuple[int, int | float],
                 drift: float = 0.0) -> GateCell:
    """The running calls of the newest transition, counted as ``gate_cell`` counts the
    gate's."""
    return _cell(_running_calls, histories, seed, builds, noise, drift)
