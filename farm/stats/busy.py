"""Blocks run beside other work on the node: which, in which arm, how much.

Each run carries the other processes' CPU over its window (``node_other_cores``, in cores:
``workers.job.telemetry.node``), the other processes it found on its GPUs
(``gpu_other_processes``) and how long its block waited for quiet (``busy_wait_s``). A
block is busy when its runs' time-weighted other cores reach ``BUSY_CORES``, or any of its
runs shared a GPU with another process.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from farm.stats.frame import NAN

# Other processes' CPU, in cores, at which a block counts as busy. From recorded blocks on
# a 2-core node (docs/busy-node.md): idle blocks measured at most 0.07 of a core, blocks
# beside a one-core busy loop at least 0.6; 0.3 sits between with room on both sides.
BUSY_CORES = 0.3
# The runs' columns a block's load is read from.
NODE_COLUMNS = ("node_other_cores", "gpu_other_processes", "busy_wait_s")


@dataclass(frozen=True)
class BusyBlocks:
    """A job's blocks measured for other work, those busy (per arm), the mean other cores
    over the busy ones and the seconds its blocks waited for quiet in all."""

    measured: int
    baseline: int
    variant: int
    cores: float
    waited_s: float

    @property
    def busy(self) -> int:
        """Busy blocks of both arms."""
        return self.baseline + self.variant


def block_loads(runs: pd.DataFrame) -> pd.DataFrame:
    """One row per measured block: its arm, other cores (weighted by the runs' e2e time),
    other GPU processes (the most any run saw), its wait, and whether it was busy."""
    columns = ["block", "arm", "cores", "gpu_others", "waited_s", "busy"]
    if "node_other_cores" not in runs.columns:
        return pd.DataFrame(columns=columns)
    measured = runs.reindex(columns=[*runs.columns.difference(list(NODE_COLUMNS)), *NODE_COLUMNS])
    measured = measured[measured["node_other_cores"].notna()].astype(
        dict.fromkeys(NODE_COLUMNS, float))
    if measured.empty:
        return pd.DataFrame(columns=columns)
    weight = measured["e2e_ms"].astype(float).clip(lower=1.0)
    frame = measured.assign(weighted=measured["node_other_cores"].astype(float) * weight,
                            weight=weight)
    grouped = frame.groupby("block")
    loads = pd.DataFrame({
        "arm": grouped["arm"].first(),
        "cores": grouped["weighted"].sum() / grouped["weight"].sum(),
        "gpu_others": grouped["gpu_other_processes"].max().fillna(0.0).astype(int),
        "waited_s": grouped["busy_wait_s"].max().fillna(0.0),
    }).reset_index()
    loads["busy"] = (loads["cores"] >= BUSY_CORES) | (loads["gpu_others"] > 0)
    return loads[columns]


def busy_blocks(runs: pd.DataFrame) -> BusyBlocks:
    """The job's busy blocks, per arm, from its runs (``block_loads``)."""
    loads = block_loads(runs)
    busy = loads[loads["busy"].astype(bool)]
    return BusyBlocks(
        measured=len(loads),
        baseline=int((busy["arm"] == "baseline").sum()),
        variant=int((busy["arm"] == "variant").sum()),
        cores=float(np.mean(busy["cores"])) if len(busy) else NAN,
        waited_s=float(loads["waited_s"].sum()) if len(loads) else 0.0)
