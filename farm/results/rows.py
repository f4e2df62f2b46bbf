"""The per-job report as plain rows (and a frame), read from the store.

``job_rows`` is the per-job report in plain Python (no pandas, no numpy: loading them took
0.4 s of a cold ``farm report --format json``, which prints the rows as they are);
``job_report`` is the same rows as the frame every other report works on. A row's
statistics are the fields of the job's summary (``farm.summary``), its facts the
summary's run facts or, for a job without them, what SQL reads from its runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine, RowMapping, bindparam, text

from farm.columns import REPORT_COLUMNS, columns_of, report_frame
from farm.gpus import bandwidth_bound_share
from farm.matrix.flags import varying_text
from farm.results.sql import job_report_sql, run_facts_sql
from farm.stats.intervals import best_of_interval
from farm.store.campaigns import campaign_id
from farm.summary import FACTS, STATISTICS, RunFacts, upgraded

if TYPE_CHECKING:
    import pandas as pd

Row = dict[str, Any]

# What a report row takes from the job's row as it is.
JOB_COLUMNS = ("campaign", "job_key", "model", "variant", "build", "gpu_class", "worker",
               "state", "error", "failure_class", "speculation", "pairs", "stop_reason",
               "log_se", "df")
# What it takes from the summary: its statistics, except those the job's row holds typed
# (log_se, df: the job's columns also hold older jobs' read-back) and those made again
# below (kind and speedup, with their fallbacks).
SUMMARY_COLUMNS = tuple(name for name in STATISTICS
                        if name not in ("log_se", "df", "kind", "speedup"))
# Measures: a float or None in rows, NaN in the frame; counters: 0 when nothing was counted.
_FLOATS, _COUNTS = columns_of("float"), columns_of("count")


def job_rows(engine: Engine, campaign: str | None) -> list[Row]:
    """One row per job (of ``campaign``, or of all campaigns), its values under
    ``REPORT_COLUMNS`` in order, None where one is missing: what each finished job kept in
    its summary; for the others, what SQL finds in their runs."""
    jobs, params = "1 = 1", {}
    if campaign is not None:
        jobs, params = "job.campaign_id = :campaign_id", {
            "campaign_id": campaign_id(engine, campaign)}
    with engine.connect() as connection:
        found = connection.execute(text(job_report_sql(jobs)), params).mappings().all()
        summaries = [upgraded(summary) if summary else {}
                     for summary in _parse_all([job["summary"] for job in found])]
        lacking = [job["job_id"] for job, summary in zip(found, summaries, strict=True)
                   if summary.get("facts") is None and job["has_runs"]]
        facts = _run_facts(connection, engine.dialect.name, lacking)
        where = _provenance(connection, [job["job_id"] for job in found if job["has_runs"]])
    rows = [{**_row(job, summary, varying, facts.get(job["job_id"], {})),
             **where.get(job["job_id"], {})}
            for job, summary, varying in zip(found, summaries,
                                             _parse_all([job["varying"] for job in found]),
                                             strict=True)]
    best = _best_of(rows)
    return [{**row, **best[index]} if index in best else row for index, row in enumerate(rows)]


def _parse_all(texts: list[str | None]) -> list[dict[str, Any]]:
    """JSON objects, SQL's NULL and JSON's null as empty ones, parsed in one pass: at tens
    of thousands of jobs a parse per object costs a fifth of a second more."""
    parsed: list[dict[str, Any] | None] = json.loads(
        f"[{','.join(text or 'null' for text in texts)}]")
    return [value or {} for value in parsed]


def job_report(engine: Engine, campaign: str | None) -> pd.DataFrame:
    """``job_rows`` as a frame (``report_frame``)."""
    return report_frame(job_rows(engine, campaign))


def run_facts(engine: Engine, job_id: int) -> RunFacts:
    """The run facts of one job, from its runs (what its summary keeps)."""
    query = text(run_facts_sql("job.id = :job_id", engine.dialect.name))
    with engine.connect() as connection:
        row = connection.execute(query, {"job_id": job_id}).mappings().one()
    return RunFacts.model_validate({name: row[name] for name in FACTS})


# Job ids bound per run-facts query: twice this stays under either database's limit on
# bound parameters (32,766 on SQLite, 65,535 on PostgreSQL).
_IDS_PER_QUERY = 10_000


def _run_facts(connection: Connection, dialect: str, job_ids: list[int]) -> dict[int, Row]:
    """The run facts of ``job_ids`` from their runs, by job id."""
    query = text(run_facts_sql("job.id IN :ids", dialect)).bindparams(
        bindparam("ids", expanding=True))
    # The ids are listed, not selected by a condition, so the planner knows how many jobs
    # it aggregates: an estimate of one job for thousands turns its joins quadratic.
    facts: dict[int, Row] = {}
    for start in range(0, len(job_ids), _IDS_PER_QUERY):
        batch = {"ids": job_ids[start:start + _IDS_PER_QUERY]}
        facts |= {row["job_id"]: dict(row) for row in connection.execute(query, batch).mappings()}
    return facts


# Where each job ran, from its runs: a hash aggregate (min and max only), so that a store of
# a million runs is read once without sorting; the hosts of the few jobs that ran on more
# than one are counted afterwards.
_PROVENANCE = text("""
SELECT job_id, MIN(server_version), MIN(host), MAX(host), MIN(gpu_name), MIN(started_at)
FROM run WHERE job_id IN :ids GROUP BY job_id""").bindparams(bindparam("ids", expanding=True))
_HOSTS = text("SELECT job_id, COUNT(DISTINCT host) FROM run WHERE job_id IN :ids "
              "GROUP BY job_id").bindparams(bindparam("ids", expanding=True))


def _provenance(connection: Connection, job_ids: list[int]) -> dict[int, Row]:
    """Where each job of ``job_ids`` ran, from its runs (``REPORT_COLUMNS``' last four)."""
    found: dict[int, Row] = {}
    several: list[int] = []
    for start in range(0, len(job_ids), _IDS_PER_QUERY):
        batch = {"ids": job_ids[start:start + _IDS_PER_QUERY]}
        for job_id, version, host, last, gpu, started in connection.execute(_PROVENANCE,
                                                                            batch):
            found[job_id] = {
                "server_version": (version or "").splitlines()[0] if version else None,
                "hosts": host, "device": gpu or "CPU", "measured_at": _utc(started)}
            if host != last:
                several.append(job_id)
    for start in range(0, len(several), _IDS_PER_QUERY):
        batch = {"ids": several[start:start + _IDS_PER_QUERY]}
        for job_id, hosts in connection.execute(_HOSTS, batch):
            found[job_id]["hosts"] = f"{hosts} hosts"
    return found


def _utc(started: Any) -> str | None:
    """A stored time (UTC, with or without its zone; SQLite may give text) in ISO 8601
    with its offset."""
    from datetime import UTC, datetime

    if started is None:
        return None
    when = started if isinstance(started, datetime) else datetime.fromisoformat(str(started))
    return (when.replace(tzinfo=UTC) if when.tzinfo is None else when.astimezone(UTC)).isoformat()


def _number(value: Any) -> float | None:
    """A measure as a float; None when missing (NaN included)."""
    if value is None:
        return None
    number = float(value)
    return None if math.isnan(number) else number


# Each arm's peak memory, the GPU's first (_memory_cost).
_PEAKS = (("peak_vram_mb_baseline", "peak_vram_mb_variant"),
          ("peak_rss_mb_baseline", "peak_rss_mb_variant"))


def _memory_cost(facts: Mapping[str, Any]) -> float | None:
    """What the variant's server holds beyond the baseline's at their peaks: VRAM where the
    runs had GPUs, else RSS (MiB)."""
    for baseline, variant in _PEAKS:
        base, peak = _number(facts.get(baseline)), _number(facts.get(variant))
        if base is not None and peak is not None:
            return peak - base
    return None


# Each row starts as a copy of this and is filled in place, in column order: a store holds
# tens of thousands of jobs, many values missing in many of them.
_BLANK_ROW: Row = dict.fromkeys(REPORT_COLUMNS)
_JOB_VALUES = itemgetter(*JOB_COLUMNS)


def _row(job: RowMapping, summary: Mapping[str, Any], varying: dict[str, Any],
         found: Mapping[str, Any]) -> Row:
    """A job's report row. Prefer the statistics written when it finished (speedup over
    block pairs, its interval, agreement, drift, and the run facts; ``summary`` upgraded to
    the current version); a job without them gets the facts of its runs (``found``: its
    speedup the geometric mean of per-prompt medians, nothing counted for a job without
    runs) and no interval."""
    facts = summary.get("facts") or found
    row = _BLANK_ROW.copy()
    row.update(zip(JOB_COLUMNS, _JOB_VALUES(job), strict=True))
    if summary:
        row.update(zip(SUMMARY_COLUMNS, map(summary.get, SUMMARY_COLUMNS), strict=True))
    if facts:
        row.update(zip(FACTS, map(facts.get, FACTS), strict=True))
    row.update({
        "varying": varying, "varying_flags": varying_text(varying),
        # Jobs that have not finished (or finished before kinds were kept) read as variants.
        "kind": summary.get("kind") or "variant", "speedup": summary.get("speedup"),
        "memory_cost_mb": _memory_cost(facts)})
    for name in _FLOATS:
        if row[name] is not None:
            row[name] = _number(row[name])
    if row["speedup"] is None:
        row["speedup"] = _number(facts.get("median_speedup"))
    # A variant that asked for speculation and drafted nothing is not a speedup to quote.
    if job["speculation"] == "none":
        row["speedup"] = row["median_speedup"] = None
    for name in _COUNTS:
        row[name] = int(_number(row[name]) or 0)
    if row["drafted"] > 0:
        row["acceptance_rate"] = row["accepted"] / row["drafted"]
    tok_s, size = row["variant_tok_s"], _number(facts.get("model_size"))
    if tok_s is not None and size is not None:
        row["bandwidth_bound"] = bandwidth_bound_share(tok_s, row["gpu_name"], int(size))
    return row


def _best_of(rows: Sequence[Row]) -> dict[int, Row]:
    """Mark the fastest of the m >= 2 variants of each campaign x model x GPU class: the row a
    reader picks, so it gets a simultaneous interval (``farm.stats.intervals.best_of_interval``).
    Control (A/A) and synthetic-acceptance jobs are not candidates: neither is a setting
    to pick. The marks by row index."""
    groups: dict[tuple[Any, ...], list[int]] = {}
    for index, row in enumerate(rows):
        if row["kind"] == "variant" and None not in (row["speedup"], row["log_se"]):
            groups.setdefault((row["campaign"], row["model"], row["gpu_class"]), []).append(index)
    marks: dict[int, Row] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        # The first of equally fast jobs, in report order.
        index = max(members, key=lambda member: rows[member]["speedup"])
        job = rows[index]
        low, high = best_of_interval(math.log(job["speedup"]), job["log_se"],
                                     int(job["df"] or 0), len(members))
        marks[index] = {"best_of": len(members), "best_low": _number(low),
                        "best_high": _number(high)}
    return marks


