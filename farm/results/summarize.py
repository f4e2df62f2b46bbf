"""Make a job's summary from its runs: the one function that does (``summarize``)."""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from farm.stats.acceptance import acceptance
from farm.stats.agreement import agreement, stop_mismatches
from farm.stats.busy import busy_blocks
from farm.stats.clock import clock_check, on_client_clock
from farm.stats.design import Design
from farm.stats.drift import drift
from farm.stats.frame import valid_runs
from farm.stats.prompt_speed import prompt_figures
from farm.stats.speedup import ZERO_SPREAD, job_estimate, pair_log_ratios
from farm.stats.traffic import latency, stream_figures
from farm.stats.warmup import warmup
from farm.summary import JobKind, JobSummary, RunFacts, SpeedClock

# The latency percentiles a summary keeps, per arm (farm.stats.traffic.latency has more).
LATENCY_KEPT = ("tpot_p50_ms", "tpot_p99_ms", "e2e_p50_ms", "e2e_p99_ms")


def summarize(runs: pd.DataFrame, facts: RunFacts, *, kind: JobKind, design: Design | None,
              no_agreement: str | None = None, streams: pd.DataFrame | None = None,
              earlier: Sequence[pd.DataFrame] = (), clock: SpeedClock = "server"
              ) -> JobSummary:
    """The job's summary from its runs (the tidy frame of ``farm.results.runs.job_runs``)
    and their ``facts``.

    ``design`` is the job's (its interval is the two-stage one when it has a second stage);
    ``no_agreement`` says why output agreement does not apply to it
    (``farm.stats.agreement``); ``streams`` are its runs' simultaneous streams, if any;
    ``earlier`` the runs of the machine's earlier jobs, latest first, that its drift test
    may be made against (``farm.results.runs.earlier_runs``); ``clock`` whose clock the
    statistics read the decode speeds of (``facts`` come on the same clock): the client's
    for a job on a commit's build, whose server is its code (``farm.stats.clock``).
    """
    witness = clock_check(runs)
    if clock == "client":
        runs, earlier = on_client_clock(runs), [on_client_clock(job) for job in earlier]
    ratios = pair_log_ratios(runs)
    found = job_estimate(runs, design)
    speedup = found.speedup
    agreed = agreement(runs, not_applicable=no_agreement)
    accepted = acceptance(runs)
    moved = drift(runs, earlier)
    busy = busy_blocks(runs)
    warmed = warmup(runs)
    latencies = {f"{name}_{arm}": float(value)
                 for arm, row in latency(runs).iterrows() for name, value in row.items()
                 if name in LATENCY_KEPT}
    return JobSummary.model_validate({
        "kind": kind,
        "speedup": speedup.estimate,
        "ci_low": speedup.low,
        "ci_high": speedup.high,
        # What a group interval needs to combine this job with others (farm.stats.pooling).
        "log_se": found.log_se,
        "df": found.df,
        "interval_method": found.method,
        # How much faster a pair's second block runs than its first, with its interval.
        "order_effect": found.order_effect,
        "order_low": found.order_low,
        "order_high": found.order_high,
        # Flags: pairs left out for a missing prompt or arm, runs with unusable tok/s, and
        # a zero spread (identical pairs, or a second stage of identical pairs: the
        # interval's variance is zero), which is a fault, not certainty.
        "incomplete_pairs": int(runs["pair"].nunique()) - speedup.pairs,
        "invalid_runs": len(runs) - len(valid_runs(runs)),
        "degenerate": bool(found.method == ZERO_SPREAD
                           or (speedup.pairs >= 2 and float(ratios.std(ddof=0)) == 0.0)),
        "agreement": agreed.identical_share,
        "agreement_control": agreed.control_share,
        "agreement_applicable": agreed.applicable,
        "agreement_suspect": agreed.suspect,
        # Variant runs that stopped at another length than the baseline's (stop: natural).
        "stop_mismatch": stop_mismatches(runs),
        "drift_flag": moved.flag,
        "drift_per_block": moved.slope_per_block,
        "drift_low": moved.low,
        "drift_high": moved.high,
        "drift_earlier_jobs": moved.earlier_jobs,
        # Blocks run beside other work on the node, per arm (farm.stats.busy): more in one
        # arm than the other biases the speedup.
        "measured_blocks": busy.measured,
        "busy_blocks": busy.busy,
        "busy_blocks_baseline": busy.baseline,
        "busy_blocks_variant": busy.variant,
        "busy_cores": busy.cores,
        "busy_wait_s": busy.waited_s,
        # A block's first run against its prompt's later runs: the warm-up request each
        # block sends was not enough when they are slower (farm.stats.warmup).
        "warmup_effect": warmed.effect,
        "warmup_low": warmed.low,
        "warmup_high": warmed.high,
        "warmup_blocks": warmed.blocks,
        "warmup_flag": warmed.flag,
        # The server's decode speeds against the client's clock (farm.stats.clock).
        "speed_clock": clock,
        "clock_ratio_baseline": witness.ratio_baseline,
        "clock_ratio_variant": witness.ratio_variant,
        "clock_disagreement": witness.disagreement,
        "clock_flag": witness.flag,
        "acceptance_low": accepted.rate_low,
        "acceptance_high": accepted.rate_high,
        "mean_accepted_length": accepted.mean_accepted_length,
        **stream_figures(runs, streams, design),
        **prompt_figures(runs),
        **latencies,
        "facts": facts,
    })
