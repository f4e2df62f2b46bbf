"""The client's clock as the witness of the server's timings.

A run's decode speed is what its server reports (``timings.predicted_per_second``): the
build's own code, which a commit can make say anything. The client times the same
generation from its stream (``client_decode_tok_s``: the tokens after the first over the
time from the first piece of text to the last), and llama.cpp's figure has the same
definition (the tokens after the first over the time from the first sampled token to the
last), so an honest server's ratio of the two is 1 but for the stream's own jitter.

Per arm, the mean over its runs of log(server / client) is its clock ratio. A lie that
inflates only the variant moves the speedup by exp(variant's - baseline's) — the
disagreement; a lie in both arms alike leaves the speedup but is still a lie. A job is
flagged when the disagreement or either arm's ratio lies farther from 1 than ``TOLERANCE``,
which is set from the spread of honest builds' jobs (docs/security.md, "The client's clock
as the witness"). A job on a commit's build takes its speeds from the client's clock
(``on_client_clock``), so whatever its server says, the speedup is the client's.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import NAN

# How far (in log units) an arm's clock ratio, or the arms' difference, may lie from 0
# before the job is flagged: above the largest the farm measured on honest builds' jobs,
# with room (docs/security.md gives the measurements).
TOLERANCE = math.log(1.05)
# Fewer runs with both speeds in an arm give ratios but no flag.
MIN_RUNS = 2


@dataclass(frozen=True)
class ClockCheck:
    """Each arm's server-over-client decode speed (geometric mean over its runs), the
    variant's over the baseline's (how many times the server's speedup exceeds the
    client's), and the flag; NaN and no flag (None) where an arm has fewer than
    ``MIN_RUNS`` runs with both speeds."""

    ratio_baseline: float
    ratio_variant: float
    disagreement: float
    flag: bool | None


def log_ratios(runs: pd.DataFrame) -> pd.Series:
    """Each run's log(server / client) decode speed; NaN where either is missing or not a
    speed (a run of under two tokens has no client speed), and for a run of simultaneous
    streams: its server figure is the mean of the streams' speeds, its client's one speed
    from their mean times (a harmonic mean: up to 1.4x apart on honest 6-token streams here)."""
    server = runs["decode_tok_s"].to_numpy(dtype=float)
    client = runs["client_decode_tok_s"].to_numpy(dtype=float) \
        if "client_decode_tok_s" in runs.columns else np.full(len(runs), NAN)
    streams = runs["concurrency"].to_numpy(dtype=float) if "concurrency" in runs.columns \
        else np.ones(len(runs))
    both = (np.isfinite(server) & np.isfinite(client) & (server > 0) & (client > 0)
            & ~(streams > 1))
    logs = np.log(np.where(both, server, 1.0)) - np.log(np.where(both, client, 1.0))
    return pd.Series(np.where(both, logs, NAN), index=runs.index)


def clock_check(runs: pd.DataFrame, tolerance: float = TOLERANCE) -> ClockCheck:
    """The job's ``ClockCheck`` from its runs (``decode_tok_s`` the server's figure)."""
    logs = log_ratios(runs)
    means = []
    for arm in ("baseline", "variant"):
        found = logs[(runs["arm"] == arm).to_numpy()].dropna()
        means.append(float(found.mean()) if len(found) >= MIN_RUNS else NAN)
    baseline, variant = means
    if math.isnan(baseline) or math.isnan(variant):
        return ClockCheck(math.exp(baseline), math.exp(variant), NAN, None)
    difference = variant - baseline
    flag = max(abs(baseline), abs(variant), abs(difference)) > tolerance
    return ClockCheck(math.exp(baseline), math.exp(variant), math.exp(difference), flag)


def on_client_clock(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with the client's decode speed as ``decode_tok_s`` (NaN where it has none:
    such a run has no usable speed, ``farm.stats.frame.usable``)."""
    return runs.assign(decode_tok_s=runs["client_decode_tok_s"].astype(float))
