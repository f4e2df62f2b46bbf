"""The tidy runs frame the statistics read (one row per run), and its shared vocabulary.

``tidy_runs`` is the one place such a frame is made: from the store's rows (reports,
sinks) or from the runs a job measured so far (the stop rule)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

NAN = float("nan")


ARMS = ("baseline", "variant")


# An array of floats, as the statistics' vectorised fits take and return them.
Floats = npt.NDArray[np.float64]

# Pair log ratios as pair_log_ratios returns them, or any sequence of floats.
LogRatios = Sequence[float] | pd.Series | Floats


# Which arm opened each pair: +1 the baseline (AB), -1 the variant (BA); as pair_orders.
Orders = Sequence[int] | npt.NDArray[np.int64] | pd.Series


def ratio(numerator: float, denominator: float) -> float:
    """numerator / denominator, NaN when nothing was counted (a zero denominator)."""
    return numerator / denominator if denominator > 0 else NAN


def check_one_job(runs: pd.DataFrame) -> None:
    """Refuse a frame with the runs of several jobs: pairs are numbered per job, and two
    jobs in one frame would silently pool their pairs."""
    if "job_id" in runs.columns and runs["job_id"].nunique() > 1:
        raise ValueError("runs hold more than one job; select one job first")


def usable(runs: pd.DataFrame) -> npt.NDArray[np.bool_]:
    """Which runs have a usable decode speed: failed runs carry NaN, zero or infinite
    throughput, which is missing data, not a slow or fast run."""
    speed = runs["decode_tok_s"].to_numpy(dtype=float)
    found: npt.NDArray[np.bool_] = np.isfinite(speed) & (speed > 0)
    return found


def valid_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs with a usable decode speed (``usable``)."""
    return runs[usable(runs)]


def tidy_runs(records: Iterable[Any], columns: Sequence[str]) -> pd.DataFrame:
    """The runs frame: one row per run (a sequence of values in ``columns`` order, or a
    mapping by column), ``columns`` in this order."""
    return pd.DataFrame(list(records), columns=list(columns))
