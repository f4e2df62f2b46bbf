"""The job summary: what a finished job found, typed and versioned, stored in ``job.summary``.

One function makes it (``farm.results.summarize.summarize``); reports read its fields
(``farm.results.rows``). A stored summary carries its ``version``; an older one is read
through the upgrade of each version after it (``UPGRADES``), never by guessing its age
from which keys it has. Migration 0014 stamped the versions of summaries stored before
they had one, by the frozen rules written there.

    version 1  the speedup, its interval and flags; no log_se/df kept (the job's columns
               hold what migration 0008 read back from the interval)
    version 2  + log_se, df, the interval's method, order effect, drift, acceptance bounds
    version 3  + the run facts (medians, counters, memory: what reports otherwise read
               from the runs)
    version 4  + kind, flat: the facts beside the statistics, ``pairs`` (the interval's)
               and ``acceptance_rate`` (accepted / drafted) kept as well
    version 5  the facts nested under ``facts``; ``pairs`` and ``acceptance_rate`` gone (the
               job's ``pairs`` column and the facts' counters say them)
    version 6  + the node's other work: blocks measured, busy (per arm), their other cores,
               the seconds blocks waited for quiet (unknown in older summaries)
    version 7  + the warm-up check: a block's first run against the same prompt's later
               runs, its interval, the blocks compared and the flag (unknown before)
    version 8  + the machine's earlier jobs the drift test was made against (unknown
               before: those summaries tested drift from the job's own blocks)
    version 9  + the client's clock as the witness of the server's timings: each arm's
               ratio of the two decode speeds, how far the server's speedup exceeds the
               client's, the flag, and whose clock the speeds are from (unknown before:
               those summaries took every speed from the server)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model

from farm.run_metrics import RUN_METRICS

SUMMARY_VERSION: Final = 9
# What a job measures (farm.matrix.spec.JobSpec.kind), kept in its summary.
JobKind = Literal["variant", "control", "synthetic", "builds"]
# Whose clock a job's decode speeds and speedup are from (farm.stats.clock): the server's
# timings, or the client's stream for a job on a commit's build (its server is its code).
SpeedClock = Literal["server", "client"]


def speed_clock(spec: Mapping[str, Any]) -> SpeedClock:
    """Whose clock a job's speeds are from, by its stored spec (``JobSpec`` as JSON): the
    client's where either arm's build is made from a source (a commit: ``BuildRef.source``),
    the server's for the operator's builds by name."""
    arms = [spec.get(role) for role in ("baseline", "variant")]
    builds = [arm.get("build") for arm in arms if isinstance(arm, Mapping)]
    return "client" if any(isinstance(build, Mapping) and build.get("source")
                           for build in builds) else "server"


def _finite(value: Any) -> Any:
    # JSON has no NaN: a statistic that could not be computed is null.
    return None if isinstance(value, float) and math.isnan(value) else value


Measure = Annotated[float | None, BeforeValidator(_finite)]


class _Fields(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class _CountedFacts(_Fields):
    """The run facts SQL works out of a job's runs by their own rules: medians, the speedup
    of per-prompt medians, counters and counts (``farm.results.sql.run_facts_sql``)."""

    baseline_tok_s: Measure = Field(None, description="Median decode tok/s of the baseline.")
    variant_tok_s: Measure = Field(None, description="Median decode tok/s of the variant.")
    median_speedup: Measure = Field(None, description="Geometric mean over prompts of the "
                                    "ratio of the arms' median decode tok/s.")
    sd_log_speedup: Measure = Field(None, description="SD over prompts of those log ratios.")
    drafted: int = Field(0, description="Tokens the variant drafted.")
    accepted: int = Field(0, description="Drafted tokens it accepted.")
    runs: int = Field(0, description="Runs of both arms.")
    gpu_name: str | None = Field(None, description="The GPU the baseline ran on.")
    model_size: int | None = Field(None, description="The model file's size in bytes.")
    throttled_runs: int = Field(0, description="Runs with a GPU throttle reason.")
    spilled_runs: int = Field(0, description="Runs whose weights were not all on the GPU.")
    draft_ms_per_token: Measure = Field(None, description="Variant's drafting ms per token.")
    verify_ms_per_token: Measure = Field(None, description="Variant's other decode ms per "
                                         "token, less accepting.")


# What SQL reads from a job's runs (farm.results.sql.run_facts_sql): the counted facts, then
# each run metric's summary per arm (farm.run_metrics: peak memory, the draft context), a
# field each, made from the metrics' declarations. Typed code sees the counted facts alone;
# ``model_dump()`` holds every field.
if TYPE_CHECKING:
    RunFacts = _CountedFacts
else:
    RunFacts = create_model(
        "RunFacts", __base__=_CountedFacts, __module__=__name__,
        __doc__="What SQL reads from a job's runs (``farm.results.sql.run_facts_sql``).",
        **{fact.name: (Measure, Field(None, description=fact.about))
           for metric in RUN_METRICS for fact in metric.per_arm})


class JobSummary(_Fields):
    """A finished job's statistics (``farm.stats``), its run facts and its kind."""

    version: Literal[9] = SUMMARY_VERSION
    kind: JobKind | None = Field(None, description="What the job measures (JobSpec.kind); "
                                 "None in summaries stored before it was kept.")
    speedup: Measure = Field(None, description="Variant over baseline decode tok/s: the "
                             "crossover estimate over block pairs.")
    ci_low: Measure = Field(None, description="Its 95% interval, low end.")
    ci_high: Measure = Field(None, description="Its 95% interval, high end.")
    log_se: Measure = Field(None, description="Standard error of the log speedup.")
    df: int | None = Field(None, description="Its degrees of freedom.")
    interval_method: str | None = Field(None, description="second-stage crossover (from "
                                        "issue 24; two-stage crossover before), sequential "
                                        "crossover (a decision design), sequential "
                                        "crossover, adjusted (a precision design), crossover, "
                                        "paired t, or zero spread (no interval).")
    order_effect: Measure = Field(None, description="How much faster a pair's second block "
                                  "runs than its first.")
    order_low: Measure = Field(None, description="Its 95% interval, low end.")
    order_high: Measure = Field(None, description="Its 95% interval, high end.")
    incomplete_pairs: int | None = Field(None, description="Pairs left out of the interval "
                                         "(a prompt or an arm missing).")
    invalid_runs: int | None = Field(None, description="Runs without a usable decode speed.")
    degenerate: bool | None = Field(None, description="Identical pairs, or a second stage "
                                    "of identical pairs: a fault.")
    agreement: Measure = Field(None, description="Share of variant outputs identical to the "
                               "baseline's.")
    agreement_control: Measure = Field(None, description="The same share for the baseline's "
                                       "later blocks against its first.")
    agreement_applicable: bool | None = Field(None, description="False when outputs need "
                                              "not match (temperature > 0, synthetic).")
    agreement_suspect: bool | None = Field(None, description="More prompts part early than "
                                           "in the control.")
    stop_mismatch: int | None = Field(None, description="Variant runs that stopped at another "
                                      "length than the baseline's.")
    drift_flag: bool | None = Field(None, description="The machine's trend differs from 0.")
    drift_per_block: Measure = Field(None, description="Its slope, log units per block.")
    drift_low: Measure = Field(None, description="Its 95% interval, low end.")
    drift_high: Measure = Field(None, description="Its 95% interval, high end.")
    drift_earlier_jobs: int | None = Field(None, description="The machine's earlier jobs "
                                           "the drift test was made against (0: the job's "
                                           "own blocks alone).")
    measured_blocks: int | None = Field(None, description="Blocks whose runs measured the "
                                        "node's other work (farm.stats.busy).")
    busy_blocks: int | None = Field(None, description="Of them, blocks run beside other "
                                    "work (other processes' CPU, or the GPU shared).")
    busy_blocks_baseline: int | None = Field(None, description="Busy blocks of the baseline.")
    busy_blocks_variant: int | None = Field(None, description="Busy blocks of the variant.")
    busy_cores: Measure = Field(None, description="Other processes' mean CPU, in cores, over "
                                "the busy blocks.")
    busy_wait_s: Measure = Field(None, description="Seconds the blocks waited for quiet.")
    warmup_effect: Measure = Field(None, description="How much faster a block's first run "
                                   "decodes than its prompt's later runs in the block "
                                   "(a ratio less 1; negative: slower).")
    warmup_low: Measure = Field(None, description="Its 95% interval, low end.")
    warmup_high: Measure = Field(None, description="Its 95% interval, high end.")
    warmup_blocks: int | None = Field(None, description="Blocks compared (0: no block "
                                      "repeats its first prompt).")
    warmup_flag: bool | None = Field(None, description="The first runs are slower: the "
                                     "whole interval below 0 (farm.stats.warmup).")
    speed_clock: SpeedClock | None = Field(None, description="Whose clock the decode "
                                           "speeds and the speedup are from: the server's "
                                           "timings, or the client's stream (a job on a "
                                           "commit's build); None before it was kept.")
    clock_ratio_baseline: Measure = Field(None, description="The baseline's decode tok/s as "
                                          "its server reported it over the client's clock's "
                                          "(geometric mean over runs; 1: they agree).")
    clock_ratio_variant: Measure = Field(None, description="The same for the variant.")
    clock_disagreement: Measure = Field(None, description="How many times the server's "
                                        "speedup exceeds the client's: the variant's ratio "
                                        "over the baseline's.")
    clock_flag: bool | None = Field(None, description="Server timings disagree with the "
                                    "client's clock beyond the honest builds' noise "
                                    "(farm.stats.clock).")
    acceptance_low: Measure = Field(None, description="Acceptance rate's 95% interval, low "
                                    "end (prompts as clusters).")
    acceptance_high: Measure = Field(None, description="Its high end.")
    mean_accepted_length: Measure = Field(None, description="(accepted + drafts) / drafts.")
    concurrency: int | None = Field(None, description="Simultaneous streams per run.")
    aggregate_speedup: Measure = Field(None, description="Speedup of the streams' aggregate "
                                       "tok/s.")
    aggregate_ci_low: Measure = Field(None, description="Its 95% interval, low end.")
    aggregate_ci_high: Measure = Field(None, description="Its 95% interval, high end.")
    overlap_min: Measure = Field(None, description="Least share of a run's window in which "
                                 "every stream decoded.")
    overlap_mean: Measure = Field(None, description="Mean of that share over runs.")
    slot_acceptance: dict[str, Measure] | None = Field(None, description="The variant's "
                                                       "acceptance per server slot.")
    low_slots: list[int] | None = Field(None, description="Slots below the others.")
    prompt_tokens: Measure = Field(None, description="Median prompt tokens per run.")
    prompt_tok_s_baseline: Measure = Field(None, description="Baseline's prompt tok/s.")
    prompt_tok_s_variant: Measure = Field(None, description="Variant's prompt tok/s.")
    tpot_p50_ms_baseline: Measure = Field(None, description="Time per output token, p50.")
    tpot_p50_ms_variant: Measure = Field(None, description="Time per output token, p50.")
    tpot_p99_ms_baseline: Measure = Field(None, description="Time per output token, p99.")
    tpot_p99_ms_variant: Measure = Field(None, description="Time per output token, p99.")
    e2e_p50_ms_baseline: Measure = Field(None, description="End-to-end latency, p50.")
    e2e_p50_ms_variant: Measure = Field(None, description="End-to-end latency, p50.")
    e2e_p99_ms_baseline: Measure = Field(None, description="End-to-end latency, p99.")
    e2e_p99_ms_variant: Measure = Field(None, description="End-to-end latency, p99.")
    facts: RunFacts | None = Field(None, description="The run facts; None in summaries "
                                   "stored before they were kept (reports read the runs).")


# The statistics' fields (every one but the version and the nested facts).
STATISTICS = tuple(name for name in JobSummary.model_fields if name not in ("version", "facts"))
FACTS = tuple(RunFacts.model_fields)
Upgrade = Callable[[dict[str, Any]], dict[str, Any]]


def _from_v1(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 1 kept no log_se or df: version 2 has them, unknown here."""
    return {**summary, "log_se": None, "df": None, "version": 2}


def _from_v2(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 2 kept no run facts: reports read them from the runs."""
    return {**summary, "version": 3}


def _from_v3(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 3 kept no kind: unknown, reports read it as a variant's."""
    return {**summary, "kind": None, "version": 4}


def _from_v4(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 4 kept the facts flat (``runs`` among them when kept at all), the interval's
    ``pairs`` and ``acceptance_rate``; version 5 nests the facts and drops the other two."""
    upgraded = {key: value for key, value in summary.items()
                if key not in FACTS and key not in ("pairs", "acceptance_rate")}
    kept = "runs" in summary
    upgraded["facts"] = {name: summary.get(name) for name in FACTS} if kept else None
    if kept:
        upgraded["facts"] |= {name: summary.get(name) or 0
                              for name in ("drafted", "accepted", "runs", "throttled_runs",
                                           "spilled_runs")}
    return {**upgraded, "version": 5}


def _from_v5(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 5 did not measure the node's other work: unknown (the fields' None)."""
    return {**summary, "version": 6}


def _from_v6(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 6 did not check the warm-up: unknown (the fields' None)."""
    return {**summary, "version": 7}


def _from_v7(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 7 did not say what its drift test was made against: unknown (None)."""
    return {**summary, "version": 8}


def _from_v8(summary: dict[str, Any]) -> dict[str, Any]:
    """Version 8 did not hold the server's timings against the client's clock: unknown."""
    return {**summary, "version": 9}


UPGRADES: dict[int, Upgrade] = {1: _from_v1, 2: _from_v2, 3: _from_v3, 4: _from_v4,
                                5: _from_v5, 6: _from_v6, 7: _from_v7, 8: _from_v8}


class SummaryError(ValueError):
    """A stored summary this farm cannot read (no version, or a newer one)."""


def upgraded(summary: dict[str, Any]) -> dict[str, Any]:
    """A stored summary in the current version's shape, through each version's upgrade."""
    version = summary.get("version")
    if not isinstance(version, int) or not 1 <= version <= SUMMARY_VERSION:
        raise SummaryError(f"job summary of version {version!r}: this farm reads versions 1 "
                           f"to {SUMMARY_VERSION}; run `farm db upgrade` (or upgrade the farm)")
    while summary.get("version") != SUMMARY_VERSION:
        summary = UPGRADES[int(summary["version"])](summary)
    return summary


def read_summary(stored: dict[str, Any] | None) -> JobSummary | None:
    """The typed summary of a stored one (None for a job without)."""
    return JobSummary.model_validate(upgraded(stored)) if stored else None
