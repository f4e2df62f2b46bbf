"""Latency percentiles, and what a job of simultaneous streams adds: the aggregate speedup
and overlap, and each slot's acceptance tested against the others."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.design import Design
from farm.stats.distributions import student_t_quantile
from farm.stats.frame import ratio
from farm.stats.speedup import job_estimate

LATENCY_PERCENTILES = (50, 90, 99)


# A slot is flagged when its acceptance is below the other slots' by more than this (in
# acceptance rate, 0.05 = 5 points) at the family-wise level SLOT_TEST_LEVEL: a real fault
# (one user saw ~3% on every slot but 0), not the last bit of batched arithmetic.
SLOT_MARGIN = 0.05


SLOT_TEST_LEVEL = 0.05


@dataclass(frozen=True)
class SlotCheck:
    """The variant's acceptance on each server slot of a run of simultaneous streams, and
    the slots whose acceptance is below the others' (``slot_acceptance``)."""

    rates: dict[int, float]  # slot -> accepted / drafted over its streams (slots that drafted)
    low: list[int]  # slots flagged
    runs: int  # runs in which every slot drafted: the test's sample


def slot_acceptance(streams: pd.DataFrame, margin: float = SLOT_MARGIN,
                    level: float = SLOT_TEST_LEVEL) -> SlotCheck:
    """Per slot, the variant's acceptance, and a test of each slot against the others.

    ``streams`` holds one row per stream (``arm``, ``block``, ``prompt_id``, ``repetition``,
    ``slot``, ``draft_n``, ``draft_accepted``). Every stream of a run reads the same prompt,
    so within a run the slots are compared on equal terms: per run, slot s's rate less the
    mean of the other slots' rates. A slot is flagged when a one-sided t test over the runs
    rejects "that difference is at least -``margin``" at ``level`` / slots (Bonferroni:
    ``level`` bounds the chance of flagging any slot of a sound server; the simulation
    measures it). Runs where a slot drafted nothing are left out; fewer than three runs
    test nothing.
    """
    variant = streams[(streams["arm"] == "variant") & streams["slot"].notna()]
    totals = variant.groupby("slot")[["draft_n", "draft_accepted"]].sum()
    rates = {int(slot): ratio(float(accepted), float(drafted))
             for slot, drafted, accepted in zip(totals.index, totals["draft_n"],
                                                totals["draft_accepted"], strict=True)
             if drafted > 0}
    rate = variant["draft_accepted"] / variant["draft_n"].where(variant["draft_n"] > 0)
    per_run = (rate.groupby([variant["block"], variant["prompt_id"], variant["repetition"],
                             variant["slot"]]).mean().unstack("slot").dropna())
    slots = [int(slot) for slot in per_run.columns]
    if len(slots) < 2 or len(per_run) < 3:
        return SlotCheck(rates, [], len(per_run))
    table = per_run.to_numpy(dtype=float)
    flagged = []
    for column, slot in enumerate(slots):
        others = np.delete(table, column, axis=1).mean(axis=1)
        gap = table[:, column] - others + margin  # >= 0 under the null
        spread = float(np.std(gap, ddof=1))
        mean = float(np.mean(gap))
        if spread == 0.0:
            low = mean < 0.0
        else:
            critical = student_t_quantile(1.0 - level / len(slots), len(gap) - 1)
            low = mean / (spread / math.sqrt(len(gap))) < -critical
        if low:
            flagged.append(slot)
    return SlotCheck(rates, flagged, len(per_run))


def latency(runs: pd.DataFrame) -> pd.DataFrame:
    """Per arm (index), p50/p90/p99 of time per output token and end-to-end latency, in ms.

    Failed runs (NaN) are left out rather than counted as fast or slow.
    """
    columns = [f"{metric}_p{q}_ms" for metric in ("tpot", "e2e") for q in LATENCY_PERCENTILES]
    rows: dict[str, list[float]] = {}
    for arm, group in runs.groupby("arm", sort=True):
        rows[str(arm)] = [float(pd.to_numeric(group[f"{metric}_ms"]).quantile(q / 100))
                          for metric in ("tpot", "e2e") for q in LATENCY_PERCENTILES]
    frame = pd.DataFrame.from_dict(rows, orient="index", columns=columns)
    return frame.rename_axis("arm")


def stream_figures(runs: pd.DataFrame, streams: pd.DataFrame | None,
                        design: Design | None = None) -> dict[str, object]:
    """What a job of simultaneous streams adds to its summary (nothing for one stream): the
    speedup of the aggregate tok/s over the decode window, estimated like the per-request
    one (pairs, crossover, the job's design); how much the streams overlapped; the
    variant's acceptance per slot and the slots ``slot_acceptance`` flags."""
    if "concurrency" not in runs.columns or not (runs["concurrency"].fillna(1) > 1).any():
        return {"concurrency": 1} if "concurrency" in runs.columns else {}
    aggregate = runs.assign(decode_tok_s=runs["aggregate_tok_s"].astype(float))
    found = job_estimate(aggregate, design).speedup
    overlap = runs["overlap"].astype(float)
    summary: dict[str, object] = {
        "concurrency": int(runs["concurrency"].max()),
        "aggregate_speedup": found.estimate, "aggregate_ci_low": found.low,
        "aggregate_ci_high": found.high,
        "overlap_min": float(overlap.min()), "overlap_mean": float(overlap.mean())}
    if streams is not None and not streams.empty:
        slots = slot_acceptance(streams)
        summary |= {"slot_acceptance": {str(slot): rate for slot, rate in slots.rates.items()},
                    "low_slots": slots.low}
    return summary
