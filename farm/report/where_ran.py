"""Which worker and host ran each block of a job measured by more than one: a job resumed
on another worker after its first was lost keeps the runs of its first blocks, and the
page says who measured which."""

from __future__ import annotations

from typing import TYPE_CHECKING

from farm.report import cells
from farm.report.sheet import Sheet, plain_sheet

if TYPE_CHECKING:
    import pandas as pd

# What a run says of where it ran; a job listed is one whose runs differ in them.
WHERE = ("attempt", "worker_name", "host")


def block_ranges(blocks: list[int]) -> str:
    """Block numbers as ranges: [0, 1, 2, 5] is "0-2, 5"."""
    spans: list[list[int]] = []
    for block in sorted(set(blocks)):
        if spans and block == spans[-1][1] + 1:
            spans[-1][1] = block
        else:
            spans.append([block, block])
    return ", ".join(f"{low}-{high}" if high > low else str(low) for low, high in spans)


def where_blocks_ran(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per job measured by more than one worker or host, and per attempt, worker
    and host that ran some of its runs (in attempt order): job, variant, attempt, worker,
    host and its blocks. Empty when every job ran on one worker and host (or the runs do
    not say where they ran)."""
    import pandas as pd

    columns = ["job_key", "variant", *WHERE, "blocks"]
    if runs.empty or not {"job_key", "block", *WHERE} <= set(runs.columns):
        return pd.DataFrame(columns=columns)
    # A run of `farm run` names no worker: keep it as a missing cell, not a dropped group.
    where = runs.assign(worker_name=runs["worker_name"].map(
        lambda name: cells.MISSING if cells.missing(name) else str(name)))
    places = where.groupby("job_key", sort=False)[["worker_name", "host"]].nunique()
    several = places[(places["worker_name"] > 1) | (places["host"] > 1)].index
    rows = []
    for (job_key, *place), group in (where[where["job_key"].isin(several)]
                                     .groupby(["job_key", *WHERE], sort=False)):
        rows.append([job_key, group["variant"].iloc[0], *place,
                     block_ranges([int(block) for block in group["block"]])])
    found = pd.DataFrame(rows, columns=columns)
    return found.sort_values(["job_key", "attempt"], kind="stable", ignore_index=True)


def where_sheet(runs: pd.DataFrame) -> Sheet | None:
    """``where_blocks_ran`` as a titled sheet; None when every job ran in one place."""
    found = where_blocks_ran(runs)
    if found.empty:
        return None
    rows = [(cells.text(key)[:10], cells.text(variant), cells.count(attempt), worker,
             cells.text(host), blocks)
            for key, variant, attempt, worker, host, blocks in found.itertuples(index=False)]
    return plain_sheet("where each block ran (jobs measured by more than one worker or host)",
                       ("job", "variant", "attempt", "worker", "host", "blocks"), rows)
