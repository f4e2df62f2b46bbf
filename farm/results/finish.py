"""What a finished job's row gets with its final state: how it ended, its summary made
afresh from every run it has in the store (``farm.results.summarize``), the summary's
log_se and df as typed columns, and whether speculation happened."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from sqlalchemy import Engine

from farm.matrix.spec import JobSpec
from farm.results.rows import run_facts
from farm.results.runs import earlier_runs, job_runs, job_streams
from farm.results.summarize import summarize
from farm.stats.design import Design
from farm.summary import JobKind, RunFacts, SpeedClock, speed_clock


def finished_job_values(engine: Engine, job_id: int, spec: JobSpec, *, asked: bool, pairs: int,
                        stop_reason: str) -> dict[str, Any]:
    """The row values of job ``job_id`` (run as ``spec``) that ran ``pairs`` block pairs and
    stopped for ``stop_reason``; ``asked``: whether its variant asked for speculation.

    Computed afresh from every run the job has at each finish, so the summary of a job
    resumed or retried covers the runs of all its attempts. A job on a commit's build takes
    its speeds from the client's clock (``farm.summary.speed_clock``).
    """
    clock = speed_clock(spec.model_dump(mode="json"))
    return job_summary_values(job_runs(engine, job_id), run_facts(engine, job_id, clock),
                              kind=spec.kind, asked=asked, pairs=pairs,
                              stop_reason=stop_reason, design=spec.design,
                              no_agreement=spec.outputs_differ,
                              streams=job_streams(engine, job_id) if spec.concurrency > 1
                              else None, earlier=earlier_runs(engine, job_id), clock=clock)


def job_summary_values(runs: pd.DataFrame, facts: RunFacts, *, kind: JobKind, asked: bool,
                       pairs: int, stop_reason: str, design: Design, no_agreement: str | None,
                       streams: pd.DataFrame | None = None,
                       earlier: Sequence[pd.DataFrame] = (),
                       clock: SpeedClock = "server") -> dict[str, Any]:
    """A job's row values from its runs and their facts: the pairs it ran and why it
    stopped, its summary (``farm.results.summarize``), the summary's log_se and df as typed
    columns, and whether speculation happened. ``earlier``: the runs of the machine's
    earlier jobs its drift test may be made against (``farm.results.runs.earlier_runs``);
    ``clock``: whose clock its speeds are from (``facts`` must be on it too).

    A variant that asked for speculation (``asked``) and drafted nothing is marked
    ``none``; reports never show its speedup.
    """
    summary = summarize(runs, facts, kind=kind, design=design, no_agreement=no_agreement,
                        streams=streams, earlier=earlier, clock=clock)
    verdict = "not-requested" if not asked else "ok" if facts.drafted else "none"
    return {"speculation": verdict, "pairs": pairs, "stop_reason": stop_reason,
            "log_se": summary.log_se, "df": summary.df,
            "summary": summary.model_dump(mode="json")}
