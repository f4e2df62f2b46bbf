"""Each per-run metric, declared once: what a run measured, as a number or a flag.

A run's row (``farm.store.models.Run``) holds where it sits in its job, its provenance, its
raw content (text, token ids, lists) and these metrics. From each declaration follow its
ORM column (``farm.store.models``), its field in a shared bundle (``farm.board.bundle``,
bounded by its unit), what a worker writes (``workers.job.sinks.run_row`` reads it from the
run's result where ``source`` says), the runs frame (every column; ``statistics``: the
frame a job's statistics read), and, where it is summarized per arm, the job summary's
fields (``farm.summary.RunFacts``), the SQL that makes them (``farm.results.sql``) and
their report columns (``farm.columns``); where each of a run's simultaneous streams has its
own figure too, the stream's column (``farm.store.models.Stream``).

A new metric is its declaration here, a migration that adds its column (``since``) and its
measurement on the node; one summarized per arm also makes the next summary version
(``farm.summary``). ``tests/unit/test_run_metrics.py`` fails on a metric named in one of
those places and not the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

# What a metric's number is, which also says its type: a float, a whole number, a flag, a
# short name. A bundle bounds each by its unit (``farm.board.bundle``).
Unit = Literal["tok/s", "ms", "s", "MiB", "J", "J/token", "W", "MHz", "cores", "load", "share",
               "tokens", "count", "°C", "flag", "name"]
Kind = Literal["float", "int", "flag", "text"]
KINDS: Final[dict[Unit, Kind]] = {"tokens": "int", "count": "int", "°C": "int", "flag": "flag",
                                  "name": "text"}
# The longest name a metric of unit "name" holds (the store's String, a bundle's text).
NAME_LENGTH: Final = 100
# How a metric is summarized over an arm's runs, and its SQL aggregate.
Aggregate = Literal["max"]
AGGREGATES: Final[dict[Aggregate, str]] = {"max": "MAX"}


@dataclass(frozen=True)
class ArmFact:
    """One arm's summary of a metric over its runs: a field of the job's run facts
    (``farm.summary.RunFacts``) and a column of the report."""

    arm: Literal["baseline", "variant"]
    name: str
    about: str  # the field's description (the report's JSON Schema)
    how: Aggregate = "max"


@dataclass(frozen=True)
class RunMetric:
    """One metric of a run: its column's name, its unit, what it is and where a worker's
    run result holds it (``source``: attributes from ``workers.job.results.RunResult``, a
    None on the way making the value null)."""

    name: str
    unit: Unit
    about: str
    source: str
    since: str = "0001"  # the migration that added its column
    required: bool = False  # every run has one (NOT NULL)
    default: int | None = None  # what a row written without it holds
    statistics: bool = False  # a job's statistics read it (farm.results.runs.job_runs)
    shared: bool = True  # a bundle carries it (farm.board.bundle.RunRecord)
    per_arm: tuple[ArmFact, ...] = ()  # its summary per arm, in the job's run facts
    stream: bool = False  # each stream's row holds its own (farm.store.models.Stream)

    @property
    def kind(self) -> Kind:
        """The metric's type, by its unit: a float unless the unit counts or names."""
        return KINDS.get(self.unit, "float")


def _timing(name: str, unit: Unit, about: str, *, required: bool = True,
            stream: bool = True) -> RunMetric:
    """A figure of the request's own timings and counts (``Generation``: its one stream's,
    or its streams' merged)."""
    return RunMetric(name, unit, about, f"generation.{name}", required=required,
                     statistics=True, stream=stream)


def _counter(name: str, about: str, source: str) -> RunMetric:
    """A speculative counter every run has (0 when nothing was drafted)."""
    return RunMetric(name, "count", about, source, required=True, default=0, statistics=True)


def _spec_stat(name: str, unit: Unit, about: str) -> RunMetric:
    """One of the server's own speculative statistics for the request, from its log."""
    return RunMetric(f"spec_{name}", unit, about, f"spec_stats.{name}", since="0009")


def _hardware(name: str, unit: Unit, about: str, *per_arm: ArmFact) -> RunMetric:
    """Telemetry over the run's window: the server process, or NVML where there is a GPU."""
    return RunMetric(name, unit, about, f"telemetry.{name}", since="0003", per_arm=per_arm)


def _node(name: str, unit: Unit, about: str, source: str, *, statistics: bool = False
          ) -> RunMetric:
    """The node's other work over the run's window (``workers.job.telemetry.node``; a block
    is busy by ``farm.stats.busy``)."""
    return RunMetric(name, unit, about, source, since="0017", statistics=statistics)


RUN_METRICS: Final = (
    _timing("prompt_tokens", "tokens", "Tokens of the prompt, as the server counted them."),
    _timing("generated_tokens", "tokens", "Tokens generated, as the server counted them."),
    _timing("prompt_tok_s", "tok/s", "Prompt processing speed.", required=False),
    _timing("decode_tok_s", "tok/s", "Decode speed by the server's timings "
            "(predicted_per_second)."),
    _timing("client_decode_tok_s", "tok/s", "Decode speed by the client's clock, the server's "
            "witness.", required=False, stream=False),
    _timing("ttft_ms", "ms", "Time to the first token."),
    _timing("e2e_ms", "ms", "The request's end-to-end time."),
    _timing("tpot_ms", "ms", "Time per output token after the first.", required=False,
            stream=False),
    # Speculation: the request's timings and the /metrics counter deltas, raw.
    RunMetric("draft_n", "tokens", "Tokens drafted, by the request's timings.",
              "generation.draft_n", required=True, default=0, stream=True),
    RunMetric("draft_accepted", "tokens", "Drafted tokens accepted, by the request's timings.",
              "generation.draft_accepted", required=True, default=0, stream=True),
    _counter("spec_drafts", "Drafts made (/metrics delta).", "counters.drafts"),
    _counter("spec_drafted", "Tokens drafted (/metrics delta).", "counters.drafted"),
    _counter("spec_accepted", "Drafted tokens accepted (/metrics delta).", "counters.accepted"),
    # The server's own speculative statistics for this request, from its log (the print
    # after the request less the one before; summed over methods when an arm has several):
    # how often the drafter was asked (draft_calls) and proposed (gen_drafts, gen_tokens),
    # verification steps of its drafts (accept_calls) and what they kept (acc_drafts with at
    # least one token, acc_tokens), and llama.cpp's timers in ms: begin (when the prompt is
    # in, outside the decode time), draft and accept (inside it). Whatever else the decode
    # time holds (the target's verification batches, sampling, draft-mtp's pass over each
    # verified batch, which llama.cpp does not time) is what reports call verify time.
    # Null where the server does not speculate.
    _spec_stat("draft_calls", "count", "Times the drafter was asked for a draft."),
    _spec_stat("accept_calls", "count", "Verification steps of its drafts."),
    _spec_stat("gen_drafts", "count", "Drafts the drafter proposed."),
    _spec_stat("acc_drafts", "count", "Drafts that kept at least one token."),
    _spec_stat("gen_tokens", "tokens", "Tokens the drafter proposed."),
    _spec_stat("acc_tokens", "tokens", "Proposed tokens kept."),
    _spec_stat("begin_ms", "ms", "llama.cpp's begin timer: when the prompt is in."),
    _spec_stat("draft_ms", "ms", "llama.cpp's draft timer."),
    _spec_stat("accept_ms", "ms", "llama.cpp's accept timer."),
    RunMetric("slot_speculative", "flag", "Whether the arm's server's slot speculates "
              "(/slots).", "slot_speculative", since="0003"),
    # Gaps between streamed chunks: not inter-token latency (a chunk can carry several
    # tokens under speculation), but what a user watching the stream sees.
    RunMetric("chunk_gap_p50_ms", "ms", "The median gap between streamed chunks.",
              "generation.chunk_gap_p50_ms", since="0005"),
    RunMetric("chunk_gap_max_ms", "ms", "The longest gap between streamed chunks.",
              "generation.chunk_gap_max_ms", since="0005"),
    # Memory per arm, in each job's run facts: the server's peak RSS and (on GPUs) VRAM over
    # its runs, and the size of the variant's draft context as its server logged it.
    _hardware("rss_mb", "MiB", "The server's peak RSS over the run.",
              ArmFact("baseline", "peak_rss_mb_baseline", "Baseline server's peak RSS."),
              ArmFact("variant", "peak_rss_mb_variant", "Variant server's peak RSS.")),
    _hardware("cpu_seconds", "s", "The server's CPU time over the run."),
    _hardware("energy_j", "J", "The GPUs' energy over the run."),
    RunMetric("joules_per_token", "J/token", "GPU energy per generated token.",
              "joules_per_token", since="0003"),
    _hardware("mean_power_w", "W", "The GPUs' mean power."),
    _hardware("max_vram_used_mb", "MiB", "The GPUs' peak memory used.",
              ArmFact("baseline", "peak_vram_mb_baseline", "Baseline's peak VRAM."),
              ArmFact("variant", "peak_vram_mb_variant", "Variant's peak VRAM.")),
    _hardware("mean_sm_clock_mhz", "MHz", "The GPUs' mean SM clock."),
    _hardware("max_temperature_c", "°C", "The GPUs' highest temperature."),
    RunMetric("throttled", "flag", "Whether a GPU throttled (null without GPU figures).",
              "throttled", since="0003"),
    RunMetric("weights_spilled", "flag", "Not all the model's layers were on the GPU.",
              "weights_spilled", since="0003"),
    # Other work on the node over the run's window: the CPU of every process outside the
    # farm's own tree (its client, its servers, sibling workers'), in cores; the 1-minute
    # load; the CPU governor and mean current frequency (null where sysfs has no cpufreq);
    # processes of others on the GPUs (null without NVML); and the seconds its block waited
    # for quiet before it started (busy-node: wait). Null in runs stored before 0017.
    _node("node_other_cores", "cores", "Other processes' CPU over the run.",
          "node.other.cores", statistics=True),
    _node("node_load_1m", "load", "The node's 1-minute load average.", "node.cpu.load_1m"),
    _node("cpu_governor", "name", "The CPU frequency governor(s).", "node.cpu.governor"),
    _node("cpu_freq_mhz", "MHz", "The CPU's mean current frequency.", "node.cpu.freq_mhz"),
    _node("gpu_other_processes", "count", "Processes of others on the GPUs.",
          "node.gpu_others", statistics=True),
    _node("busy_wait_s", "s", "Seconds its block waited for quiet.", "node.waited_s",
          statistics=True),
    # The run's block before its first run: its server's start (launch to /health
    # answering: the model's load) and its warm-up request, the same on every run of a
    # block (null before 0027).
    RunMetric("server_start_s", "s", "Its block's server start, launch to /health answering.",
              "start.server_s", since="0027"),
    RunMetric("warmup_s", "s", "Its block's warm-up request.", "start.warmup_s",
              since="0027"),
    # MiB of the server's contexts, from its log (workers.job.runtime.server_log): the
    # target's KV cache and recurrent state, and the whole speculative draft context.
    RunMetric("kv_mib", "MiB", "The target context's KV cache and recurrent state.",
              "memory.kv_mib", since="0010"),
    RunMetric("draft_context_mib", "MiB", "The whole speculative draft context.",
              "memory.draft_context_mib", since="0010", per_arm=(
                  ArmFact("variant", "draft_context_mib", "The variant's draft context size."),)),
    # A run of N simultaneous streams holds their totals and means above; here what they
    # delivered together over their decode window (the first stream's first token to the
    # last one's last): tokens after each stream's first per second, and the share of the
    # window in which every stream was decoding (null for one stream).
    RunMetric("aggregate_tok_s", "tok/s", "The streams' tokens per second of their window.",
              "window.aggregate_tok_s", since="0012", statistics=True),
    RunMetric("overlap", "share", "Share of the window every stream was decoding.",
              "window.overlap", since="0012", statistics=True),
)
