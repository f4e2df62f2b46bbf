"""A job's series on one build: each quantity a history follows, with its interval.

A series is one quantity of a job followed across builds (docs/history.md): the speedup
(the job's own crossover estimate), either arm's decode tok/s, the variant's acceptance
per draft position and mean acceptance length, and its draft and verify ms per token. The
unit of evidence is the block (one server session of one arm): repetitions inside a
session are not independent, blocks are. Each series' estimate is the mean of its block
values, on the log scale by the delta method (log of the mean, standard error sd / (mean
sqrt(n)), n - 1 df), so that ``farm.stats.difference`` compares two builds' values as it
compares two speedups.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import ARMS, NAN, ratio, valid_runs
from farm.stats.intervals import log_interval

# Series every job has, in the order reports list them; acceptance per position
# ("acceptance_1", ...) comes between the tok/s and the costs, as many as the draft is long.
SPEEDUP, BASELINE, VARIANT = "speedup", "baseline_tok_s", "variant_tok_s"
LENGTH, DRAFT_COST = "mean_accepted_length", "draft_ms_per_token"
VERIFY_COST = "verify_ms_per_token"
ACCEPTANCE = "acceptance_"
# Series where a rise is a regression (a cost); for every other a fall is.
COSTS = frozenset({DRAFT_COST, VERIFY_COST})
# Series that a machine's drift between jobs moves: each arm's speed and the timers (not
# the speedup, both arms measured in one job, nor acceptance, the same text each time).
BETWEEN_JOBS = frozenset({BASELINE, VARIANT, DRAFT_COST, VERIFY_COST})


def series_order(series: str) -> tuple[int, int]:
    """Where ``series`` sits in a report: speedup, tok/s, acceptance by position, length,
    costs."""
    fixed = (SPEEDUP, BASELINE, VARIANT, ACCEPTANCE, LENGTH, DRAFT_COST, VERIFY_COST)
    if series.startswith(ACCEPTANCE):
        return fixed.index(ACCEPTANCE), int(series.removeprefix(ACCEPTANCE))
    return (fixed.index(series), 0) if series in fixed else (len(fixed), 0)


def series_label(series: str) -> str:
    """How a report names a series: "verify ms/token", "acceptance @2"."""
    if series.startswith(ACCEPTANCE):
        return f"acceptance @{series.removeprefix(ACCEPTANCE)}"
    return {SPEEDUP: "speedup", BASELINE: "baseline tok/s", VARIANT: "variant tok/s",
            LENGTH: "acceptance length", DRAFT_COST: "draft ms/token",
            VERIFY_COST: "verify ms/token"}.get(series, series)


@dataclass(frozen=True)
class Estimate:
    """A series' value on one build with its 95% interval, the log standard error and df
    its difference test reads (NaN where there is no spread to read), and its blocks."""

    value: float
    low: float
    high: float
    log_se: float
    df: float
    blocks: int


def mean_estimate(values: Sequence[float]) -> Estimate:
    """The mean of block values (finite ones) with its interval on the log scale: log of
    the mean, standard error sd / (mean sqrt(n)) by the delta method, n - 1 df. A mean of
    zero or less, one block, or no spread has no interval."""
    finite = np.asarray([value for value in values if math.isfinite(value)], dtype=float)
    if finite.size == 0:
        return Estimate(NAN, NAN, NAN, NAN, NAN, 0)
    mean = float(finite.mean())
    if finite.size < 2 or mean <= 0:
        return Estimate(mean, NAN, NAN, NAN, NAN, int(finite.size))
    log_se = float(finite.std(ddof=1)) / (mean * math.sqrt(finite.size))
    df = float(finite.size - 1)
    # No spread (every draft accepted in every block): no interval, never a zero-wide one.
    low, high = log_interval(math.log(mean), log_se, df) if log_se > 0 else (NAN, NAN)
    return Estimate(mean, low, high, log_se, df, int(finite.size))


def _per_block(runs: pd.DataFrame, arm: str) -> list[pd.DataFrame]:
    chosen = valid_runs(runs[runs["arm"] == arm])
    return [block for _, block in chosen.groupby("block", sort=True)]


def _positions(block: pd.DataFrame) -> list[float]:
    """Accepted at each draft position per draft, over the block's runs with the counters."""
    totals: list[float] = []
    drafts = 0.0
    for counts, run_drafts in zip(block["spec_accepted_per_pos"], block["spec_drafts"],
                                  strict=True):
        if not isinstance(counts, list | tuple | np.ndarray) or len(counts) == 0:
            continue
        totals.extend([0.0] * (len(counts) - len(totals)))
        for position, count in enumerate(counts):
            totals[position] += float(count)
        drafts += float(run_drafts or 0)
    return [ratio(total, drafts) for total in totals]


def _variant_block(block: pd.DataFrame) -> dict[str, float]:
    """One variant block's acceptance and costs (its runs summed)."""
    drafts = float(block["spec_drafts"].fillna(0).sum())
    accepted = float(block["spec_accepted"].fillna(0).sum())
    values = {LENGTH: ratio(accepted + drafts, drafts)}
    values |= {f"{ACCEPTANCE}{position + 1}": rate
               for position, rate in enumerate(_positions(block))}
    timed = block[block["spec_draft_ms"].notna()]
    tokens = (timed["generated_tokens"].astype(float) - 1.0).clip(lower=0.0)
    if float(tokens.sum()) > 0:
        decode_ms = tokens * 1000.0 / timed["decode_tok_s"].astype(float)
        draft_ms = timed["spec_draft_ms"].astype(float)
        verify_ms = decode_ms - draft_ms - timed["spec_accept_ms"].fillna(0).astype(float)
        values[DRAFT_COST] = float(draft_ms.sum()) / float(tokens.sum())
        values[VERIFY_COST] = float(verify_ms.sum()) / float(tokens.sum())
    return values


def block_values(runs: pd.DataFrame) -> dict[str, list[float]]:
    """Each series' value per block of one job's runs (the speedup aside: see
    ``job_series``). Columns read: arm, block, decode_tok_s, generated_tokens, spec_drafts,
    spec_accepted, spec_accepted_per_pos, spec_draft_ms, spec_accept_ms."""
    values: dict[str, list[float]] = {}
    for arm, series in (("baseline", BASELINE), ("variant", VARIANT)):
        values[series] = [float(block["decode_tok_s"].astype(float).mean())
                          for block in _per_block(runs, arm)]
    for block in _per_block(runs, "variant"):
        if float(block["spec_drafts"].fillna(0).sum()) <= 0:
            continue  # a block that drafted nothing measured no acceptance or cost
        for series, value in _variant_block(block).items():
            values.setdefault(series, []).append(value)
    # llama.cpp counts every position a drafter may reach (an n-gram drafter's 48): the
    # positions after the last one that ever accepted are not series.
    positions = sorted((int(name.removeprefix(ACCEPTANCE)) for name in values
                        if name.startswith(ACCEPTANCE)), reverse=True)
    for position in positions:
        if any(value > 0 for value in values[f"{ACCEPTANCE}{position}"]):
            break
        del values[f"{ACCEPTANCE}{position}"]
    return values


def _drafting_pairs(runs: pd.DataFrame, arm: str) -> dict[int, dict[str, float]]:
    """Each pair's block of ``arm`` that drafted: its acceptance and costs."""
    return {int(block["pair"].iloc[0]): _variant_block(block) for block in _per_block(runs, arm)
            if float(block["spec_drafts"].fillna(0).sum()) > 0}


def ratio_estimate(older: Sequence[float], newer: Sequence[float]) -> Estimate:
    """mean(newer) / mean(older) over pairs (both finite), with its interval on the log scale:
    standard error by the delta method, the sd over pairs of newer_i / mean(newer) -
    older_i / mean(older) over sqrt(n), n - 1 df. No spread: no interval (the ratio is
    exact, as a series without spread is)."""
    both = np.asarray([(a, b) for a, b in zip(older, newer, strict=True)
                       if math.isfinite(a) and math.isfinite(b)], dtype=float).reshape(-1, 2)
    means = both.mean(axis=0) if both.size else np.asarray([NAN, NAN])
    if both.shape[0] < 2 or not (means > 0).all():
        return Estimate(NAN, NAN, NAN, NAN, NAN, int(both.shape[0]))
    value = float(means[1] / means[0])
    differences = both[:, 1] / means[1] - both[:, 0] / means[0]
    log_se = float(differences.std(ddof=1)) / math.sqrt(both.shape[0])
    df = float(both.shape[0] - 1)
    low, high = log_interval(math.log(value), log_se, df) if log_se > 0 else (NAN, NAN)
    return Estimate(value, low, high, log_se, df, int(both.shape[0]))


def cross_series(runs: pd.DataFrame) -> dict[str, Estimate]:
    """A job across builds (both arms one flags, the variant arm on the newer build): each
    series of a drafting arm (acceptance, length, draft and verify cost) as the newer
    build's over the older's, block against block within each pair where both drafted
    (``ratio_estimate``). A drift of the machine between jobs moves both arms alike and
    cancels, as it does in a speedup. Columns read: ``block_values``' and pair."""
    older, newer = (_drafting_pairs(runs, arm) for arm in ARMS)
    pairs = sorted(set(older) & set(newer))
    names = {name for pair in pairs for name in (*older[pair], *newer[pair])}
    found = {name: ratio_estimate([older[pair].get(name, NAN) for pair in pairs],
                                  [newer[pair].get(name, NAN) for pair in pairs])
             for name in names}
    return {name: estimate for name, estimate in found.items()
            if math.isfinite(estimate.value)}


def job_series(runs: pd.DataFrame, speedup: float, log_se: float, df: float
               ) -> dict[str, Estimate]:
    """Every series of one job on one build: the speedup as the job estimated it (its
    crossover estimate, ``log_se`` and ``df``), the others from its blocks."""
    found = {SPEEDUP: _speedup(speedup, log_se, df)}
    found |= {series: mean_estimate(values) for series, values in block_values(runs).items()}
    return {series: estimate for series, estimate in found.items()
            if math.isfinite(estimate.value)}


def _speedup(speedup: float, log_se: float, df: float) -> Estimate:
    if not (math.isfinite(speedup) and speedup > 0):
        return Estimate(NAN, NAN, NAN, NAN, NAN, 0)
    low, high = log_interval(math.log(speedup), log_se, df) if math.isfinite(df) else (NAN,
                                                                                      NAN)
    return Estimate(speedup, low, high, log_se, df, 0)
