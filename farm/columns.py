"""The per-job report's columns, as data, read by every side that shows them: the rows and
their dtypes (``farm.results.rows``: CSV, JSON, the frame) and the per-job tables (the
terminal's, ``farm.report.text``, and the page's, ``farm.report.html_tables``).

``REPORT_COLUMNS`` is each row's columns in order. A column the summary or its run facts
hold (``farm.summary``) takes its dtype from the field's type; the others (the job's own
columns, and what the report works out) say theirs here. ``JOB_TABLE`` is the per-job
table: each column's header, the report columns it shows, where it appears and how it
gives way on a narrow terminal (``rank``) or window (``html_rank``).
"""

from __future__ import annotations

import json
import math
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Literal

from farm.summary import FACTS, STATISTICS, JobSummary, RunFacts

if TYPE_CHECKING:
    import pandas as pd

# float: NaN where missing; count: 0 when nothing was counted; optional count: pandas'
# nullable integer; object: whatever the values are (text, flags, lists, mappings).
Dtype = Literal["float", "count", "optional count", "object"]

# A report row's columns, in the order CSV and JSON give them: the job's, then what
# every summary version stored, then what later versions added (after the columns above,
# so that readers of older rows find every column where it was).
_ORDER = (
    "campaign", "job_key", "model", "variant", "build", "varying", "varying_flags", "gpu_class",
    "worker", "kind", "state", "error", "failure_class", "speculation", "baseline_tok_s",
    "variant_tok_s", "speedup",
    "ci_low", "ci_high", "pairs", "log_se", "df", "stop_reason", "sd_log_speedup",
    "acceptance_rate", "mean_accepted_length", "drafted", "accepted", "agreement",
    "agreement_suspect", "drift_flag", "tpot_p50_ms_baseline", "tpot_p50_ms_variant",
    "tpot_p99_ms_variant", "e2e_p50_ms_baseline", "e2e_p50_ms_variant", "e2e_p99_ms_variant",
    "throttled_runs", "spilled_runs", "gpu_name", "bandwidth_bound", "runs", "incomplete_pairs",
    "invalid_runs", "degenerate", "best_of", "best_low", "best_high", "draft_ms_per_token",
    "verify_ms_per_token", "stop_mismatch", "peak_rss_mb_baseline", "peak_rss_mb_variant",
    "peak_vram_mb_baseline", "peak_vram_mb_variant", "draft_context_mib", "memory_cost_mb",
    "concurrency", "aggregate_speedup", "aggregate_ci_low", "aggregate_ci_high", "overlap_min",
    "slot_acceptance", "low_slots", "prompt_tokens", "prompt_tok_s_baseline",
    "prompt_tok_s_variant",
    # Stored from the first and shown since the summary was typed.
    "interval_method", "order_effect", "order_low", "order_high", "agreement_control",
    "agreement_applicable", "drift_per_block", "drift_low", "drift_high", "acceptance_low",
    "acceptance_high", "overlap_mean", "tpot_p99_ms_baseline", "e2e_p99_ms_baseline",
    "median_speedup", "model_size",
    # The node's other work (farm.stats.busy), from summary version 6.
    "measured_blocks", "busy_blocks", "busy_blocks_baseline", "busy_blocks_variant",
    "busy_cores", "busy_wait_s",
    # The warm-up check (farm.stats.warmup), from summary version 7.
    "warmup_effect", "warmup_low", "warmup_high", "warmup_blocks", "warmup_flag",
    # What the drift test was made against (issue 38), from summary version 8.
    "drift_earlier_jobs",
    # The server's timings against the client's clock (issue 55, farm.stats.clock), from
    # summary version 9.
    "speed_clock", "clock_ratio_baseline", "clock_ratio_variant", "clock_disagreement",
    "clock_flag",
    # Where and with what it was measured (issue 29), from its runs: the llama-server
    # version line, the host (or how many), GPU name or CPU, the first run's start (UTC).
    "server_version", "hosts", "device", "measured_at")

# The columns no summary field types, with their dtypes: the job's own columns, and what
# the report works out from the job, its runs and the other rows.
OWN_DTYPES: dict[str, Dtype] = {
    **dict.fromkeys(("campaign", "job_key", "model", "variant", "build", "varying",
                     "varying_flags", "gpu_class", "worker", "state", "error",
                     "failure_class", "speculation", "stop_reason", "bandwidth_bound",
                     "server_version", "hosts", "device", "measured_at"), "object"),
    "pairs": "optional count",  # the job's column: the pairs the interval holds
    "acceptance_rate": "float",  # accepted / drafted
    "best_of": "optional count", "best_low": "float", "best_high": "float",
    "memory_cost_mb": "float"}
# Summary fields whose report column the job's own typed column holds (log_se, df: older
# jobs' read back by migration 0008), or the report works out anew with a fallback
# (speedup, kind): the same dtypes.


# What the per-job report's JSON (``farm report --format json``) names itself, and its
# version: an object {"schema": REPORT_SCHEMA, "version": REPORT_VERSION, "jobs": [row,
# ...]}, each row the columns below and its ``headline`` (``report_json_schema``). A
# version holds every column of the one before with its type, so a reader of version N
# reads any later one; a column renamed, removed or retyped makes the next version (a
# column added does not). ``farm.results.printed`` keeps whole reports under it.
#     version 1  the rows of ``REPORT_COLUMNS`` (issue 40; a bare list before)
REPORT_SCHEMA: Final = "specfarm.report"
REPORT_VERSION: Final = 1


def _text(description: str) -> dict[str, Any]:
    return {"type": ["string", "null"], "description": description}


def _number(description: str) -> dict[str, Any]:
    return {"type": ["number", "null"], "description": description}


# The JSON Schema of each column no summary field describes (the job's own, and what the
# report works out), where a summary field does, its own (``farm.summary``).
OWN_SCHEMAS: dict[str, dict[str, Any]] = {
    "campaign": {"type": "string", "description": "The campaign the job belongs to."},
    "job_key": {"type": "string", "description": "sha256 of what makes the experiment "
                "(farm.matrix.spec.JobSpec.job_key)."},
    "model": {"type": "string", "description": "The model's name in the matrix."},
    "variant": {"type": "string", "description": "The variant's name (a sweep's value in "
                "brackets)."},
    "build": {"type": "string", "description": "The builds of the two arms (one name when "
              "the same)."},
    "varying": {"type": "object", "description": "What the variant changes of the "
                "baseline: option or axis -> value (null: the option removed)."},
    "varying_flags": {"type": "string", "description": "varying as flags, for a table."},
    "gpu_class": {"type": "string", "description": "The class of machine the job ran on."},
    "worker": _text("The worker that ran it; every worker of its runs, in the order they "
                    "ran, when it was resumed on another; null for `farm run`."),
    "state": {"enum": ["queued", "running", "done", "failed", "lost", "cancelled"],
              "description": "The job's state (farm.store.models.JobState)."},
    "error": _text("Why the job failed, as its error said."),
    "failure_class": _text("The failure's class (farm.errors)."),
    "speculation": _text("Whether the variant drafted: ok, none (asked and drafted "
                         "nothing), not-requested."),
    "stop_reason": _text("Why the job stopped adding pairs."),
    "pairs": {"type": ["integer", "null"], "description": "Block pairs the interval holds."},
    "acceptance_rate": _number("Accepted / drafted tokens."),
    "best_of": {"type": ["integer", "null"], "description": "Where this is the fastest of "
                "m variants: m, its interval widened for the choice (best_low, best_high)."},
    "best_low": _number("The best-of-m interval's low end."),
    "best_high": _number("The best-of-m interval's high end."),
    "memory_cost_mb": _number("MiB the variant's server holds beyond the baseline's at "
                              "their peaks (VRAM, else RSS)."),
    "bandwidth_bound": _number("The variant's decode tok/s as a share of the GPU's "
                               "memory-bandwidth bound."),
    "server_version": _text("llama-server's version line."),
    "hosts": _text("The host the runs were measured on, or how many hosts."),
    "device": _text("The GPU's name, or CPU."),
    "measured_at": _text("The first run's start, UTC with its offset (ISO 8601)."),
}


def _summary_schemas() -> dict[str, dict[str, Any]]:
    """Each summary field's JSON Schema as pydantic gives it, less its title and default."""
    fields = {**JobSummary.model_json_schema()["properties"],
              **RunFacts.model_json_schema()["properties"]}
    return {name: {key: value for key, value in fields[name].items()
                   if key not in ("title", "default")} for name in (*STATISTICS, *FACTS)}


def report_row_schema() -> dict[str, Any]:
    """A report row's JSON Schema: every column, in order, with its type and meaning."""
    typed = _summary_schemas() | OWN_SCHEMAS
    return {"type": "object", "properties": {name: typed[name] for name in REPORT_COLUMNS},
            "required": list(REPORT_COLUMNS), "additionalProperties": False}


def _field_dtype(annotation: Any, default: Any) -> Dtype:
    """A summary field's dtype from its type: a measure is a float, a counter a count (0
    by default), a whole number that may be unknown an optional count, the rest object."""
    options = set(typing.get_args(annotation)) if isinstance(
        annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union \
        else {annotation}
    options.discard(type(None))
    if options == {float}:
        return "float"
    if options == {int}:
        return "count" if default == 0 else "optional count"
    return "object"


def _summary_dtypes() -> dict[str, Dtype]:
    fields = {**JobSummary.model_fields, **RunFacts.model_fields}
    return {name: _field_dtype(fields[name].annotation, fields[name].default)
            for name in (*STATISTICS, *FACTS)}


@dataclass(frozen=True)
class ReportColumn:
    """One column of the report's rows: its name and its dtype in the frame."""

    name: str
    dtype: Dtype


def _report_columns() -> tuple[ReportColumn, ...]:
    typed = _summary_dtypes() | OWN_DTYPES
    # A run metric's summary per arm that _ORDER does not place (farm.run_metrics) joins the
    # rows after every column there, in its declaration's order.
    later = tuple(name for name in FACTS if name not in _ORDER)
    return tuple(ReportColumn(name, typed[name]) for name in (*_ORDER, *later))


REPORT = _report_columns()
REPORT_COLUMNS = [column.name for column in REPORT]


# What a row takes from the other rows of its report (``farm.results.rows``: the fastest
# of several variants gets the best-of interval). A row kept with its job
# (``farm.results.rows.keep_rows``) holds them null, in this text, which a report replaces.
ACROSS_JOBS = ("best_of", "best_low", "best_high")
KEPT_BLANKS = "".join(f'"{name}":null,' for name in ACROSS_JOBS)


def row_json(row: Mapping[str, Any]) -> str:
    """A report row as one compact JSON object, its keys in its order; NaN and infinities
    read null (JSON has neither), as in pandas' ``to_json``."""
    try:
        return json.dumps(row, separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps({key: None if isinstance(value, float) and not math.isfinite(value)
                           else value for key, value in row.items()}, separators=(",", ":"))


def columns_of(dtype: Dtype) -> tuple[str, ...]:
    """The report columns of ``dtype``."""
    return tuple(column.name for column in REPORT if column.dtype == dtype)


def report_frame(rows: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """Report rows (``farm.results.rows.job_rows``) as a frame of the columns' dtypes: NaN
    for a missing measure, nullable integers for whole numbers that may be unknown."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=REPORT_COLUMNS)
    return frame.astype({**dict.fromkeys(columns_of("float"), float),
                         **dict.fromkeys(columns_of("count"), int),
                         **dict.fromkeys(columns_of("optional count"), "Int64")})


Place = Literal["text", "html"]


@dataclass(frozen=True)
class TableColumn:
    """One column of the per-job table: its header, the report columns it shows, the
    tables it appears in, and how it gives way: ``rank`` on a narrow terminal (0 always
    stays, then 1, 2, ...), ``html_rank`` in a narrow window (1 hides below 1100 px, 2
    below 1800 px)."""

    header: str
    shows: tuple[str, ...]
    rank: int = 0
    html_rank: int = 0
    places: tuple[Place, ...] = ("text", "html")
    numeric: bool = False
    splits: bool = False  # the terminal table splits by its value when it hides it


# The per-job table, in the order both show it.
JOB_TABLE = (
    TableColumn("job", ("job_key",), rank=10, html_rank=2),
    TableColumn("model", ("model",), rank=1, splits=True),
    TableColumn("variant", ("variant", "kind")),
    TableColumn("varying flags", ("varying_flags",), rank=4, html_rank=1),
    TableColumn("class", ("gpu_class",), rank=7, places=("text",), splits=True),
    TableColumn("state", ("state",), rank=5, places=("text",)),
    TableColumn("baseline tok/s", ("baseline_tok_s",), rank=3, html_rank=1, numeric=True),
    TableColumn("variant tok/s", ("variant_tok_s",), rank=3, html_rank=1, numeric=True),
    TableColumn("speedup [95% CI]", ("speedup", "ci_low", "ci_high", "speculation",
                                     "clock_flag", "speed_clock"), numeric=True),
    TableColumn("aggregate [95% CI]", ("aggregate_speedup", "aggregate_ci_low",
                                       "aggregate_ci_high", "concurrency"),
                rank=13, places=("text",), numeric=True),
    TableColumn("prompt tok", ("prompt_tokens",), rank=14, places=("text",), numeric=True),
    TableColumn("pairs", ("pairs",), rank=6, html_rank=1, numeric=True),
    TableColumn("stop reason", ("stop_reason",), html_rank=2, places=("html",)),
    TableColumn("accept", ("acceptance_rate",), numeric=True),
    TableColumn("mean accepted length", ("mean_accepted_length",), html_rank=2,
                places=("html",), numeric=True),
    TableColumn("agree", ("agreement", "agreement_suspect"), rank=2, numeric=True),
    TableColumn("drift", ("drift_flag",), html_rank=1, places=("html",)),
    TableColumn("node", ("busy_blocks", "busy_cores", "warmup_flag"), html_rank=2,
                places=("html",)),
    TableColumn("drafted", ("drafted",), rank=9, places=("text",), numeric=True),
    TableColumn("draft / verify ms/tok", ("draft_ms_per_token", "verify_ms_per_token"),
                rank=11, html_rank=2, numeric=True),
    TableColumn("memory MiB", ("memory_cost_mb", "draft_context_mib"), rank=12, html_rank=2,
                numeric=True),
    TableColumn("runs", ("runs",), rank=8, places=("text",), numeric=True),
    # Latency per arm, the percentiles the summary keeps (farm.results.summarize): the
    # last to join a narrow terminal's table, every one in markdown, a pipe and --wide.
    TableColumn("TPOT p50 ms (base/var)", ("tpot_p50_ms_baseline", "tpot_p50_ms_variant"),
                rank=15, places=("text",), numeric=True),
    TableColumn("TPOT p99 ms (base/var)", ("tpot_p99_ms_baseline", "tpot_p99_ms_variant"),
                rank=16, places=("text",), numeric=True),
    TableColumn("flags", ("speculation", "agreement_suspect", "drift_flag", "failure_class",
                          "throttled_runs", "spilled_runs", "stop_mismatch", "best_of",
                          "clock_flag", "speed_clock"),
                places=("text",)),
)


def table_columns(place: Place) -> tuple[TableColumn, ...]:
    """The per-job table's columns in ``place``, in order."""
    return tuple(column for column in JOB_TABLE if place in column.places)
