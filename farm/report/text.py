"""The farm's result tables (``Sheet``s: ``farm.report.sheet`` fits them to a terminal or
writes them as markdown), and reports as JSON.

Every table gives way on a narrow terminal by its columns' ranks: the columns a reader needs
to read a row (what ran, the speedup with its interval, the verdict) have rank 0 and always
stay; the rest go, highest rank first. CSV and JSON always carry every column.

pandas and rich load where a frame or a table is used, not with this module: ``farm report
--format json`` prints plain rows (``rows_to_json``) without either.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from farm.columns import (
    ACROSS_JOBS,
    KEPT_BLANKS,
    REPORT_SCHEMA,
    REPORT_VERSION,
    report_row_schema,
    row_json,
    table_columns,
)
from farm.report import cells
from farm.report.sheet import Column, Row, Sheet, frame_sheet
from farm.words import CLIENT_CLOCK, CLOCKS_DISAGREE, LOOKING, NOT_REACHABLE

if TYPE_CHECKING:
    import pandas as pd


def to_json(report: pd.DataFrame) -> str:
    """A JSON list, one object per line; NaN and missing values are null."""
    lines = report.to_json(orient="records", lines=True, double_precision=15,
                           date_format="iso")
    # The encoder escapes newlines inside strings: each one left ends a record.
    return _json_list(lines.rstrip("\n").split("\n"))


def rows_to_json(rows: Sequence[Mapping[str, Any]],
                 kept: Sequence[str | None] | None = None) -> str:
    """The per-job report's JSON of plain rows (``farm.results.rows.job_rows``), without
    pandas: its schema and version, then the rows under ``jobs``, one a line, each as
    ``to_json`` gives it (``report_json_schema``). Where ``kept`` holds a row's JSON as
    kept with its job, that text is printed with the columns worked out across jobs
    (``ACROSS_JOBS``) and the headline from the row, never parsed nor encoded again: a
    store's 20,000 rows are 50 MB of JSON."""
    if kept is None:
        return _json_report([row_json(row) for row in rows])
    # A report's rows share a few headlines: each is encoded once.
    headlines: dict[str | None, str] = {}
    return _json_report([row_json(row) if text is None else _kept_json(row, text, headlines)
                         for row, text in zip(rows, kept, strict=True)])


# What the report's JSON opens with: everything but its rows and the brackets closing them.
REPORT_OPENING = json.dumps({"schema": REPORT_SCHEMA, "version": REPORT_VERSION},
                            separators=(",", ":"))[:-1] + ',"jobs":['


def _json_report(objects: Sequence[str]) -> str:
    return REPORT_OPENING + "\n" + ",\n".join(objects) + "\n]}"


def report_json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of ``rows_to_json``'s report: its name and version,
    and every row's columns with their types and meanings (``farm schema --report``)."""
    row = report_row_schema()
    row["properties"]["headline"] = {
        "type": ["string", "null"], "description": "The answer of the row's campaign x model "
        "x GPU class, as the report opens with it (empty where it has no variant job)."}
    row["required"].append("headline")
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "farm report --format json",
        "description": f"The per-job report of specfarm, version {REPORT_VERSION}: a row per "
                       "job, in the order of the table (docs/results.md).",
        "type": "object",
        "properties": {
            "schema": {"const": REPORT_SCHEMA, "description": "What this document is."},
            "version": {"const": REPORT_VERSION, "description": "The report's version: a "
                        "later one keeps every column of this one, with its type."},
            "jobs": {"type": "array", "items": row}},
        "required": ["schema", "version", "jobs"],
        "additionalProperties": False}


def _kept_json(row: Mapping[str, Any], text: str, headlines: dict[str | None, str]) -> str:
    """A kept row's JSON ``text`` with the values ``row`` adds: the ``ACROSS_JOBS``
    columns where the text holds them null (most rows: none), the headline (if any) last."""
    if any(row.get(name) is not None for name in ACROSS_JOBS):
        before, blanks, after = text.partition(KEPT_BLANKS)
        if not blanks:
            raise ValueError("a kept report row without its blank across-jobs columns")
        text = f"{before}{row_json({name: row.get(name) for name in ACROSS_JOBS})[1:-1]},{after}"
    if "headline" not in row:
        return text
    headline = row["headline"]
    if headline not in headlines:
        headlines[headline] = json.dumps(headline)
    return f"{text[:-1]},\"headline\":{headlines[headline]}}}"


def _json_list(objects: Sequence[str]) -> str:
    return "[\n" + ",\n".join(objects) + "\n]"


def _speedup_cell(row: Row) -> str:
    if cells.missing(row["speedup"]) and row["speculation"] == "none":
        return "no drafts"
    return cells.interval(row["speedup"], row["ci_low"], row["ci_high"])


def _flags(row: Row) -> str:
    flags = []
    if row["speculation"] == "none":
        flags.append("no drafts")
    if cells.flag(row["agreement_suspect"]):
        flags.append("outputs diverge")
    if cells.flag(row["drift_flag"]):
        flags.append("drift")
    flags += _clock_flags(row)
    stopped = cells.text(row.get("stop_reason"))
    if stopped.startswith(NOT_REACHABLE) or row.get("interval_method") in LOOKING:
        flags.append(stopped)
    flags += cells.block_notes(row)
    if failure := cells.text(row["failure_class"]):
        flags.append(failure)
    if row["throttled_runs"]:
        flags.append(f"GPU throttled in {row['throttled_runs']} runs")
    if row["spilled_runs"]:
        flags.append("weights not all on GPU")
    if not cells.missing(row.get("stop_mismatch")) and int(row["stop_mismatch"]) > 0:
        flags.append(f"{int(row['stop_mismatch'])} runs stopped at another length")
    flags += _stream_flags(row)
    if not cells.missing(row.get("best_of")):
        flags.append(f"best of {int(row['best_of'])}: "
                     f"{cells.bracket(row['best_low'], row['best_high'])} together")
    return ", ".join(flags)


def _clock_flags(row: Row) -> list[str]:
    """Where the server's timings disagree with the client's clock, and where the speeds
    are the client's (a job on a commit's build)."""
    return [note for note, holds in ((CLOCKS_DISAGREE, cells.flag(row.get("clock_flag"))),
                                     (CLIENT_CLOCK, row.get("speed_clock") == "client"))
            if holds]


# Below this share of their decode window together, simultaneous streams were not really
# simultaneous: the aggregate then measures streams taking turns.
OVERLAP_FLOOR = 0.8


def _stream_flags(row: Row) -> list[str]:
    """What to doubt in a job of simultaneous streams: streams that took turns more than
    they ran together, and slots of low acceptance."""
    flags = []
    if not cells.missing(row.get("overlap_min")) and row["overlap_min"] < OVERLAP_FLOOR:
        flags.append(f"streams overlapped {cells.percent(row['overlap_min'], 0)} at least")
    if isinstance(row.get("low_slots"), list) and row["low_slots"]:
        flags.append(_low_slots(row["low_slots"], row.get("slot_acceptance") or {}))
    return flags


def _low_slots(slots: list[int], rates: dict[str, float]) -> str:
    others = [rate for slot, rate in rates.items() if int(slot) not in slots]
    named = ", ".join(f"{slot} ({cells.percent(rates.get(str(slot)), 0)})" for slot in slots)
    typical = f" vs {cells.percent(sum(others) / len(others), 0)}" if others else ""
    return f"acceptance low on slot {named}{typical}"


def _aggregate_cell(row: Row) -> str:
    if cells.missing(row.get("aggregate_speedup")):
        return ""
    return (f"{int(row['concurrency'])}x: " + cells.interval(
        row["aggregate_speedup"], row["aggregate_ci_low"], row["aggregate_ci_high"]))


# Each per-job column's cell in the terminal (farm.columns.JOB_TABLE: headers, order, ranks).
JOB_CELLS: dict[str, Callable[[Row], str]] = {
    "job": lambda row: str(row["job_key"])[:10],
    "model": lambda row: str(row["model"]),
    "variant": cells.variant,
    "varying flags": lambda row: str(row["varying_flags"]),
    "class": lambda row: str(row["gpu_class"]),
    "state": lambda row: str(row["state"]),
    "baseline tok/s": lambda row: cells.number(row["baseline_tok_s"]),
    "variant tok/s": lambda row: cells.number(row["variant_tok_s"]),
    "speedup [95% CI]": _speedup_cell,
    "aggregate [95% CI]": _aggregate_cell,
    "prompt tok": lambda row: cells.number(row.get("prompt_tokens"), 0),
    "pairs": lambda row: cells.count(row["pairs"]),
    "accept": lambda row: cells.percent(row["acceptance_rate"], 0),
    "agree": lambda row: cells.percent(row["agreement"], 0),
    "drafted": lambda row: str(row["drafted"]),
    "draft / verify ms/tok": lambda row: cells.time_split(row["draft_ms_per_token"],
                                                          row["verify_ms_per_token"]),
    "memory MiB": lambda row: cells.memory_cost(row["memory_cost_mb"],
                                                row["draft_context_mib"]),
    "runs": lambda row: str(row["runs"]),
    "TPOT p50 ms (base/var)": lambda row: cells.pair(row.get("tpot_p50_ms_baseline"),
                                                     row.get("tpot_p50_ms_variant")),
    "TPOT p99 ms (base/var)": lambda row: cells.pair(row.get("tpot_p99_ms_baseline"),
                                                     row.get("tpot_p99_ms_variant")),
    "flags": _flags,
}
def _speedup_tone(row: Row) -> str | None:
    return None if cells.missing(row["speedup"]) else cells.tone(row["ci_low"], row["ci_high"])


# The per-job columns a terminal colours: a speedup clearly faster, or clearly slower.
JOB_TONES: dict[str, Callable[[Row], str | None]] = {
    "speedup [95% CI]": _speedup_tone,
    "aggregate [95% CI]": lambda row: cells.tone(row.get("aggregate_ci_low"),
                                                 row.get("aggregate_ci_high")),
}
JOB_COLUMNS = tuple(Column(column.header, JOB_CELLS[column.header], column.numeric,
                           column.rank, column.splits, JOB_TONES.get(column.header))
                    for column in table_columns("text"))


def job_sheet(report: pd.DataFrame, title: str) -> Sheet:
    """The per-job table (fitted: variant, speedup, acceptance and flags always)."""
    return frame_sheet(title, JOB_COLUMNS, report)


# A grouped row against no speedup, its false discovery rate held across the table's rows.
_VERDICT_COLUMNS = (
    Column("q", lambda row: cells.number(row["q_value"], 3), True, rank=1),
    Column("verdict", lambda row: str(row["verdict"])),
)


def group_sheet(groups: pd.DataFrame, by: str) -> Sheet:
    """Jobs grouped by ``by``: typical speedup with its interval, spread and verdict (q: the
    false discovery rate across the rows), range, counters."""
    columns = (
        Column(by, lambda row: cells.labelled(row[by], row.get("kind"))),
        Column("jobs", lambda row: str(row["jobs"]), True, rank=1),
        Column("speedup", lambda row: cells.ratio(row["speedup"]), True),
        Column("95% CI (typical job)", lambda row: cells.bracket(row["low"], row["high"]),
               True),
        Column("tau", lambda row: cells.number(row["tau"], 3), True, rank=2),
        *_VERDICT_COLUMNS,
        Column("min", lambda row: cells.ratio(row["min_speedup"]), True, rank=3),
        Column("max", lambda row: cells.ratio(row["max_speedup"]), True, rank=3),
        Column("drafted", lambda row: str(row["drafted"]), True, rank=4),
        Column("accepted", lambda row: str(row["accepted"]), True, rank=4),
        Column("runs", lambda row: str(row["runs"]), True, rank=5),
    )
    return frame_sheet(f"by {by}", columns, groups)


_CATEGORY_COLUMNS = (
    Column("variant", lambda row: str(row["variant"])),
    Column("category", lambda row: str(row["category"])),
    Column("jobs", lambda row: str(row["jobs"]), True, rank=1),
    Column("speedup", lambda row: cells.ratio(row["speedup"]), True),
    Column("95% CI (typical job)", lambda row: cells.bracket(row["low"], row["high"]), True),
    Column("tau", lambda row: cells.number(row["tau"], 3), True, rank=2),
    *_VERDICT_COLUMNS,
)


def category_sheet(summary: pd.DataFrame, title: str) -> Sheet:
    """Per variant and prompt category: typical speedup, its interval, spread and verdict."""
    return frame_sheet(f"{title}: speedup by prompt category", _CATEGORY_COLUMNS, summary)


def _builds(row: Row) -> str:
    a, b = str(row["build_a"]), str(row["build_b"])
    return a if a == b else f"{a} -> {b}"


def compare_sheet(frame: pd.DataFrame, a: str, b: str) -> Sheet:
    """Matching jobs of A and B: both speedups, the change with its interval, its q value
    (Benjamini-Hochberg) and the verdict."""
    columns = (
        Column("model", lambda row: str(row["model"]), rank=1, splits=True),
        Column("variant", lambda row: str(row["variant"])),
        Column("varying flags", lambda row: str(row["varying_flags"]), rank=4),
        Column("build", _builds, rank=3),
        Column(f"speedup {a}", lambda row: cells.interval(
            row["speedup_a"], row["ci_low_a"], row["ci_high_a"]), True, rank=2),
        Column(f"speedup {b}", lambda row: cells.interval(
            row["speedup_b"], row["ci_low_b"], row["ci_high_b"]), True, rank=2),
        Column("change", lambda row: cells.interval(
            row["change"], row["change_low"], row["change_high"]), True),
        Column("q", lambda row: cells.number(row["q_value"], 3), True, rank=1),
        Column("baseline tok/s", lambda row: f"{cells.number(row['baseline_tok_s_a'])} -> "
               f"{cells.number(row['baseline_tok_s_b'])}", True, rank=5),
        Column("verdict", lambda row: str(row["verdict"])),
    )
    return frame_sheet(f"{a} -> {b}", columns, frame)


def _engine(row: Row) -> str:
    return " · ".join(str(row[key]) for key in ("model", "gpu_class", "build", "spec_type"))


def curve_sheets(curves: pd.DataFrame, points: pd.DataFrame, title: str) -> list[Sheet]:
    """The engine cost curve: per engine and draft length the step cost and break-even
    with their intervals; then every point (one synthetic-acceptance job each)."""
    fits = (
        Column("engine (model · GPU class · build · spec type)", _engine),
        Column("n-max", lambda row: str(row["draft_n_max"]), True),
        Column("points", lambda row: str(row["points"]), True, rank=3),
        Column("lengths", lambda row: f"{row['length_min']:.2f}-{row['length_max']:.2f}",
               True, rank=2),
        Column("step cost (plain steps)", lambda row: cells.interval(
            row["step_cost"], row["step_cost_low"], row["step_cost_high"]).replace(
                cells.TIMES, ""), True),
        Column("break-even length", lambda row: cells.interval(
            row["break_even"], row["break_even_low"], row["break_even_high"]).replace(
                cells.TIMES, ""), True),
        Column("speedup at longest", lambda row: cells.interval(
            row["speedup_at_max"], row["speedup_at_max_low"], row["speedup_at_max_high"]),
            True, rank=1),
        Column("tau", lambda row: cells.number(row["tau"], 3), True, rank=4),
        Column("fit (lack-of-fit p)", lambda row: f"{row['shape']} "
               f"({cells.number(row['lack_of_fit_p'], 3)})", True, rank=2),
    )
    dots = (
        Column("engine", _engine),
        Column("n-max", lambda row: cells.count(row["draft_n_max"]), True),
        Column("synth-len", lambda row: cells.number(row["synth_len"], 2), True, rank=1),
        Column("measured length", lambda row: cells.number(row["acceptance_length"], 3), True),
        Column("speedup", lambda row: cells.interval(row["speedup"], row["ci_low"],
                                                     row["ci_high"]), True),
        Column("step cost", lambda row: cells.number(row["step_cost"], 2), True, rank=2),
    )
    caption = ("step cost: one speculative step with n-max drafted tokens, all accepted, in "
               "plain decode steps; break-even: the acceptance length (tokens per step, the "
               "target's included) where the speedup is 1; 95% intervals")
    return [frame_sheet(f"{title}: engine cost curve", fits, curves, caption),
            frame_sheet(f"{title}: points (synthetic-acceptance jobs)", dots, points)]


def recommendation_sheets(chosen: pd.DataFrame, candidates: pd.DataFrame,
                          title: str) -> list[Sheet]:
    """What to use per GPU class x model x category, why; then every candidate."""
    picks = (
        Column("GPU class", lambda row: str(row["gpu_class"])),
        Column("model", lambda row: str(row["model"])),
        Column("category", lambda row: str(row["category"])),
        Column("use", lambda row: str(row["recommended"])),
        Column("predicted", lambda row: cells.interval(row["speedup"], row["low"],
                                                       row["high"]), True),
        Column("runner-up", lambda row: f"{row['runner_up']} "
               f"({cells.ratio(row['runner_up_speedup'])})" if row["runner_up"] else "",
               rank=1),
        Column("why", lambda row: str(row["why"]), rank=2),
    )
    options = (
        Column("GPU class", lambda row: str(row["gpu_class"]), rank=1),
        Column("model", lambda row: str(row["model"]), rank=1),
        Column("category", lambda row: str(row["category"]), rank=1),
        Column("setting", lambda row: str(row["setting"])),
        Column("n-max", lambda row: str(row["draft_n_max"]), True),
        Column("length", lambda row: cells.number(row["length"], 2), True, rank=2),
        Column("predicted", lambda row: cells.interval(row["speedup"], row["low"],
                                                       row["high"]), True),
        Column("rank", lambda row: cells.count(row["rank"]), True),
        Column("extrapolated", lambda row: str(row["extrapolated"]), rank=3),
    )
    caption = ("predicted: speedup from the drafter's measured acceptance per position and "
               "the engine cost curve, 95% interval over both; length: tokens per step")
    return [frame_sheet(f"{title}: recommended settings", picks, chosen),
            frame_sheet(f"{title}: every candidate", options, candidates, caption)]


def check_sheet(checked: pd.DataFrame, title: str) -> Sheet:
    """Predicted vs measured per candidate the verification campaign ran."""
    columns = (
        Column("GPU class", lambda row: str(row["gpu_class"]), rank=2),
        Column("model", lambda row: str(row["model"]), rank=2),
        Column("category", lambda row: str(row["category"]), rank=2),
        Column("setting", lambda row: f"{row['setting']} n-max {row['draft_n_max']}"),
        Column("predicted", lambda row: cells.interval(row["speedup"], row["low"],
                                                       row["high"]), True),
        Column("measured", lambda row: cells.interval(
            row["speedup_measured"], row["ci_low"], row["ci_high"]), True),
        Column("± (measured)", lambda row: cells.percent(row["half_width"]), True, rank=1),
        Column("verdict", lambda row: str(row["verdict"])),
    )
    return frame_sheet(f"{title}: predicted vs measured", columns, checked)


def _farm_tok_s(row: Row) -> str:
    estimate, known = cells.number(row["farm_tok_s"]), cells.bracket(row["farm_low"],
                                                                     row["farm_high"])
    return estimate if known == cells.MISSING else f"{estimate} {known}"


def _peer_tok_s(row: Row) -> str:
    """The figure with only the spread its peer gave: ± its sd, n its repetitions."""
    text = cells.number(row["tok_s" if "tok_s" in row else "peer_tok_s"])
    sd = row.get("tok_s_sd", row.get("peer_sd"))
    repetitions = row.get("repetitions", row.get("peer_repetitions"))
    if not cells.missing(sd):
        text += f" ± {cells.number(sd, 2)}"
    return text + (f" (n={cells.count(repetitions)})" if not cells.missing(repetitions) else "")


def _peer_build(row: Row) -> str:
    commit, number = cells.text(row["build_commit"]), row["build_number"]
    return " ".join(part for part in (commit, "" if cells.missing(number)
                                      else f"b{int(number)}") if part) or cells.MISSING


def peer_sheets(matched: pd.DataFrame, unmatched: pd.DataFrame, title: str) -> list[Sheet]:
    """Imported figures beside the farm arm that ran the same thing (the farm's tok/s with
    its 95% interval over blocks), then the imported figures no arm matches."""
    beside = (
        Column("model", lambda row: str(row["model"]), rank=2),
        Column("variant", lambda row: str(row["variant"])),
        Column("arm", lambda row: str(row["arm"])),
        Column("measure", lambda row: str(row["measure"]), rank=1),
        Column("farm tok/s [95% CI]", _farm_tok_s, True),
        Column("imported tok/s", _peer_tok_s, True),
        Column("imported / farm", lambda row: cells.ratio(row["peer_over_farm"]), True),
        Column("tool · test", lambda row: f"{row['tool']} · {row['test']}", rank=3),
        Column("source", lambda row: str(row["source"]), rank=4),
    )
    alone = (
        Column("tool · test", lambda row: f"{row['tool']} · {row['test']}"),
        Column("measure", lambda row: str(row["measure"]), rank=1),
        Column("tok/s", _peer_tok_s, True),
        Column("model file", lambda row: cells.text(row["model_file"]) or cells.MISSING,
               rank=2),
        Column("build", _peer_build, rank=2),
        Column("threads", lambda row: cells.count(row["n_threads"]), True, rank=3),
        Column("source", lambda row: f"{row['file_name']}: {row['source']}", rank=4),
    )
    tables = [frame_sheet(f"{title}: imported figures beside the farm's (kind imported, never "
                     "in the farm's intervals)", beside, matched,
                     None if len(matched) else "no imported figure matches a job here: same "
                     "model file, build (commit or number) and threads are needed")]
    if len(unmatched):
        tables.append(frame_sheet("imported figures no farm job matches", alone, unmatched))
    return tables
