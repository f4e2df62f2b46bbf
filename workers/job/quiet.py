"""Before a block: wait for the node to be quiet, refuse to run on a busy one, or only
flag it afterwards (the job's ``busy-node``; docs/busy-node.md)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from time import monotonic

from farm.errors import NodeBusy
from farm.matrix.spec import JobSpec
from workers.job.telemetry.node import OtherWork, measure

log = logging.getLogger("farm.worker")

# How long one look at the node lasts: long enough that a process busy on one core shows
# as most of one (ticks are 10 ms), short enough to start soon after it ends.
PROBE_S = 2.0

Measure = Callable[[Sequence[int], float], OtherWork]


def settle(spec: JobSpec, block: int, roots: Sequence[int], look: Measure = measure) -> float:
    """Seconds the block waited for quiet (0 under ``flag``, or when it was quiet at once);
    ``NodeBusy`` under ``refuse`` when the node is busy. Past the wait's bound the block
    runs anyway, and its runs are flagged as any busy run is."""
    if spec.busy_node == "flag":
        return 0.0
    where = f"job {spec.job_key[:10]} block {block}"
    work = look(roots, PROBE_S)
    if not work.busy:
        return 0.0
    if spec.busy_node == "refuse":
        raise NodeBusy(f"{where}: the node is busy ({work.describe()}); busy-node: refuse "
                       "runs no block beside other work, so the job is tried again later")
    log.warning("%s: the node is busy (%s); waiting up to %.0f s for quiet (busy-node: wait)",
                where, work.describe(), spec.busy_wait)
    started = monotonic()
    while work.busy and monotonic() - started < spec.busy_wait:
        work = look(roots, PROBE_S)
    waited = monotonic() - started
    if work.busy:
        log.warning("%s: still busy after %.0f s (%s); running it anyway, flagged", where,
                    waited, work.describe())
    else:
        log.warning("%s: quiet after %.0f s of waiting", where, waited)
    return waited
