"""The per-job report as plain rows (and a frame), read from the store.

``job_rows`` is the per-job report in plain Python (no pandas, no numpy: loading them took
0.4 s of a cold ``farm report --format json``, which prints the rows as they are);
``job_report`` is the same rows as the frame every other report works on. A row's
statistics are the fields of the job's summary (``farm.summary``), its facts the
summary's run facts or, for a job without them, what SQL reads from its runs.

A report keeps each row it works out with its job (``job.report_row``, unless the job is
running), and the next report takes it as it is while the job's columns are unchanged:
``farm report --format json`` prints kept rows as their text, without parsing or encoding
them (``report_rows``). Workers cannot write kept rows (``farm.store.roles``), so a row
shows what the store's own columns say.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import Connection, Engine, bindparam, text
from sqlalchemy.exc import DBAPIError

from farm.columns import (
    ACROSS_JOBS,
    KEPT_BLANKS,
    REPORT_COLUMNS,
    columns_of,
    report_frame,
    row_json,
)
from farm.gpus import bandwidth_bound_share
from farm.matrix.flags import varying_text
from farm.results.sql import MOVING_STATES, job_report_sql, run_facts_sql
from farm.stats.intervals import best_of_interval
from farm.store.campaigns import campaign_id
from farm.summary import (
    FACTS,
    STATISTICS,
    SUMMARY_VERSION,
    RunFacts,
    SpeedClock,
    speed_clock,
    upgraded,
)

if TYPE_CHECKING:
    import pandas as pd

Row = dict[str, Any]
log = logging.getLogger(__name__)

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


@dataclass(frozen=True)
class JobRows:
    """A report's rows in order. ``rows[i]`` is job i's row; where ``kept[i]`` holds the
    JSON text of job i's row as an earlier report kept it, ``rows[i]`` holds only ``HEAD``, what
    a report works out across jobs from, with those marks (asked for with ``kept``)."""

    rows: list[Row]
    kept: list[str | None] | None  # None: not asked for, every row whole


# What a kept row's head holds besides its key: with the job's own columns, what the
# best-of marks and the headline read.
_HEAD = ("kind", "speedup", "ci_low", "ci_high")
HEAD = ("campaign", "model", "variant", "gpu_class", "log_se", "df", *_HEAD)
# A kept row is the row of its job as its columns were (``_key``), by the row's code of one
# version: a new summary version, new columns or a change to ``_row`` (bump ``_FORMAT``)
# make it be worked out again.
_FORMAT = 2  # 2: a job resumed on another worker names every worker of its runs
_VERSION = hashlib.sha256(
    f"{_FORMAT}:{SUMMARY_VERSION}:{','.join(REPORT_COLUMNS)}".encode()).hexdigest()[:12]


def job_rows(engine: Engine, campaign: str | None) -> list[Row]:
    """One row per job (of ``campaign``, or of all campaigns), its values under
    ``REPORT_COLUMNS`` in order, None where one is missing: what each finished job kept in
    its summary; for the others, what SQL finds in their runs."""
    return report_rows(engine, campaign, kept=False).rows


def report_rows(engine: Engine, campaign: str | None, *, kept: bool) -> JobRows:
    """``job_rows``; with ``kept``, the rows kept with their jobs as their JSON text (and
    ``HEAD``). Rows worked out here are kept for the next report, but those of running or
    lost jobs (when this connection may write: a read-only role or a busy SQLite file only
    skips keeping). A store of 20,000 jobs prints its kept rows in 1.4-1.7 s; working them
    out and keeping them takes about 6 s (tests/bench/bench_fleet_scale.py; a whole report
    kept, ``farm.results.printed``, prints in 0.7 s)."""
    jobs, params = "1 = 1", {}
    if campaign is not None:
        jobs, params = "job.campaign_id = :campaign_id", {
            "campaign_id": campaign_id(engine, campaign)}
    with engine.connect() as connection:
        found = cast("list[Row]", connection.execute(
            text(job_report_sql(jobs)), params).mappings().all())
        heads = _parse_heads([job["report_head"] for job in found])
        texts = [job["report_row"] if head.get("key") == _key(job)
                 and _whole(job["report_row"]) else None
                 for job, head in zip(found, heads, strict=True)]
        fresh = [job for job, kept_text in zip(found, texts, strict=True) if kept_text is None]
        made = iter(_made_rows(connection, engine.dialect.name, fresh))
    parsed = iter(_parse_all([] if kept else [t for t in texts if t is not None]))
    rows = [next(made) if kept_text is None else
            {**{name: job[name] for name in HEAD[:6]}, **{name: head[name] for name in _HEAD}}
            if kept else next(parsed)
            for job, head, kept_text in zip(found, heads, texts, strict=True)]
    _keep(engine, [(job, row) for job, row, kept_text in zip(found, rows, texts, strict=True)
                   if kept_text is None and job["state"] not in MOVING_STATES])
    best = _best_of(rows)
    rows = [{**row, **best[index]} if index in best else row for index, row in enumerate(rows)]
    return JobRows(rows, texts if kept else None)


def _whole(kept: str | None) -> bool:
    """Whether ``kept`` is a row as ``_keep`` writes it: one object, campaign first, its
    across-jobs columns blank (a row text edited by hand is worked out again)."""
    return (kept is not None and kept.startswith('{"campaign":') and kept.endswith("}")
            and KEPT_BLANKS in kept)


def _key(job: Mapping[str, Any]) -> str:
    """What a kept row must have been kept at: this code's row version and every column of
    the job it was worked out from (its summary changes only with its finish time, its
    runs only while it is running)."""
    seen = repr(tuple(map(job.__getitem__, KEYED))).encode()
    return f"{_VERSION}:{hashlib.blake2b(seen, digest_size=8).hexdigest()}"


# The job's columns a report row is worked out from (``farm.results.sql.JOB_SQL``): kept
# rows are keyed by them, and so are whole printed reports (``farm.results.printed``).
KEYED = ("state", "attempt", "finished_at", "worker", "error", "failure_class", "speculation",
         "pairs", "stop_reason", "log_se", "df", "campaign", "job_key", "model", "variant",
         "build", "gpu_class", "varying")


def _made_rows(connection: Connection, dialect: str,
               found: Sequence[Mapping[str, Any]]) -> list[Row]:
    """The rows of ``found`` jobs worked out from their summaries and, for jobs without
    one, their runs."""
    if not found:
        return []
    # A job whose kept row is out of date came without its summary: read it now.
    late = _summaries(connection, [job["job_id"] for job in found if job["summary"] is None
                                   and job["has_runs"] is None])
    found = [{**job, **late[job["job_id"]]} if job["job_id"] in late else job
             for job in found]
    summaries = [upgraded(summary) if summary else {}
                 for summary in _parse_all([job["summary"] for job in found])]
    lacking = [job["job_id"] for job, summary in zip(found, summaries, strict=True)
               if summary.get("facts") is None and job["has_runs"]]
    facts = _run_facts(connection, dialect, lacking)
    where = _provenance(connection, [job["job_id"] for job in found if job["has_runs"]])
    return [{**_row(job, summary, varying, facts.get(job["job_id"], {})),
             **where.get(job["job_id"], {})}
            for job, summary, varying in zip(found, summaries,
                                             _parse_all([job["varying"] for job in found]),
                                             strict=True)]


_SUMMARIES = text("SELECT job.id AS job_id, CAST(job.summary AS TEXT) AS summary, EXISTS "
                  "(SELECT 1 FROM run WHERE run.job_id = job.id) AS has_runs FROM job "
                  "WHERE job.id IN :ids").bindparams(bindparam("ids", expanding=True))


def _summaries(connection: Connection, job_ids: list[int]) -> dict[int, Row]:
    """The summaries of ``job_ids`` and whether each has runs, by job id."""
    found: dict[int, Row] = {}
    for start in range(0, len(job_ids), _IDS_PER_QUERY):
        batch = {"ids": job_ids[start:start + _IDS_PER_QUERY]}
        found |= {row["job_id"]: dict(row)
                  for row in connection.execute(_SUMMARIES, batch).mappings()}
    return found


_KEEP = text("UPDATE job SET report_row = :report_row, report_head = :report_head "
             "WHERE id = :job_id AND state = :state AND attempt = :attempt")


def _keep(engine: Engine, made: Sequence[tuple[Mapping[str, Any], Row]]) -> None:
    """Keep the rows just ``made`` with their jobs (where the job is still in that state at
    that attempt), the across-jobs columns blank; without, when this store may not be
    written now."""
    if not made:
        return
    values = [{"job_id": job["job_id"], "state": job["state"], "attempt": job["attempt"],
               "report_row": row_json({**row, **dict.fromkeys(ACROSS_JOBS)}),
               "report_head": row_json({"key": _key(job),
                                        **{name: row[name] for name in _HEAD}})}
              for job, row in made]
    try:
        with engine.begin() as connection:
            connection.execute(_KEEP, values)
    except DBAPIError as exc:
        log.debug("report rows not kept: %s", exc)


def _parse_all(texts: list[str | None]) -> list[dict[str, Any]]:
    """JSON objects, SQL's NULL and JSON's null as empty ones, parsed in one pass: at tens
    of thousands of jobs a parse per object costs a fifth of a second more."""
    parsed: list[dict[str, Any] | None] = json.loads(
        f"[{','.join(text or 'null' for text in texts)}]")
    return [value or {} for value in parsed]


def _parse_heads(texts: list[str | None]) -> list[dict[str, Any]]:
    """Kept rows' heads (``_parse_all``); one that is not a JSON object (edited by hand)
    reads as none, so its row is worked out again."""
    try:
        parsed = _parse_all(texts)
    except ValueError:
        return [_parse_head(text) for text in texts]
    return [head if isinstance(head, dict) else {} for head in parsed]


def _parse_head(head: str | None) -> dict[str, Any]:
    try:
        parsed = json.loads(head or "null")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def job_report(engine: Engine, campaign: str | None) -> pd.DataFrame:
    """``job_rows`` as a frame (``report_frame``)."""
    return report_frame(job_rows(engine, campaign))


def run_facts(engine: Engine, job_id: int, clock: SpeedClock = "server") -> RunFacts:
    """The run facts of one job, from its runs (what its summary keeps), its decode speeds
    by ``clock``."""
    query = text(run_facts_sql("job.id = :job_id", engine.dialect.name, clock))
    with engine.connect() as connection:
        row = connection.execute(query, {"job_id": job_id}).mappings().one()
    return RunFacts.model_validate({name: row[name] for name in FACTS})


# Job ids bound per run-facts query: twice this stays under either database's limit on
# bound parameters (32,766 on SQLite, 65,535 on PostgreSQL).
_IDS_PER_QUERY = 10_000


_SPECS = text("SELECT id, CAST(spec AS TEXT) FROM job WHERE id IN :ids").bindparams(
    bindparam("ids", expanding=True))


def _run_facts(connection: Connection, dialect: str, job_ids: list[int]) -> dict[int, Row]:
    """The run facts of ``job_ids`` from their runs, by job id, each job's decode speeds by
    its clock (``farm.summary.speed_clock``: a commit's build is timed by the client)."""
    clocks: dict[SpeedClock, list[int]] = {"server": [], "client": []}
    for start in range(0, len(job_ids), _IDS_PER_QUERY):
        batch = {"ids": job_ids[start:start + _IDS_PER_QUERY]}
        for job_id, spec in connection.execute(_SPECS, batch):
            clocks[speed_clock(json.loads(spec or "{}"))].append(job_id)
    facts: dict[int, Row] = {}
    for clock, ids in clocks.items():
        query = text(run_facts_sql("job.id IN :ids", dialect, clock)).bindparams(
            bindparam("ids", expanding=True))
        # The ids are listed, not selected by a condition, so the planner knows how many
        # jobs it aggregates: an estimate of one job for thousands turns its joins quadratic.
        for start in range(0, len(ids), _IDS_PER_QUERY):
            batch = {"ids": ids[start:start + _IDS_PER_QUERY]}
            facts |= {row["job_id"]: dict(row)
                      for row in connection.execute(query, batch).mappings()}
    return facts


# Where each job ran, from its runs: a hash aggregate (min and max only), so that a store of
# a million runs is read once without sorting; the hosts and workers of the few jobs that
# ran on more than one are listed afterwards.
_PROVENANCE = text("""
SELECT job_id, MIN(server_version), MIN(host), MAX(host), MIN(gpu_name), MIN(started_at),
       MIN(worker_name), MAX(worker_name)
FROM run WHERE job_id IN :ids GROUP BY job_id""").bindparams(bindparam("ids", expanding=True))
_HOSTS = text("SELECT job_id, COUNT(DISTINCT host) FROM run WHERE job_id IN :ids "
              "GROUP BY job_id").bindparams(bindparam("ids", expanding=True))
# Each worker that ran some of a job's runs, in the order it started its first.
_WORKERS = text("SELECT job_id, worker_name FROM run WHERE job_id IN :ids AND worker_name "
                "IS NOT NULL GROUP BY job_id, worker_name ORDER BY job_id, MIN(started_at), "
                "worker_name").bindparams(bindparam("ids", expanding=True))


def _provenance(connection: Connection, job_ids: list[int]) -> dict[int, Row]:
    """Where each job of ``job_ids`` ran, from its runs (``REPORT_COLUMNS``' last four),
    and, for a job resumed on another worker, every worker that ran its runs as its
    ``worker`` (the job's own column names only the last)."""
    found: dict[int, Row] = {}
    several: list[int] = []
    resumed: list[int] = []
    for start in range(0, len(job_ids), _IDS_PER_QUERY):
        batch = {"ids": job_ids[start:start + _IDS_PER_QUERY]}
        for (job_id, version, host, last, gpu, started,
             worker, last_worker) in connection.execute(_PROVENANCE, batch):
            found[job_id] = {
                "server_version": (version or "").splitlines()[0] if version else None,
                "hosts": host, "device": gpu or "CPU", "measured_at": _utc(started)}
            if host != last:
                several.append(job_id)
            if worker != last_worker:
                resumed.append(job_id)
    for start in range(0, len(several), _IDS_PER_QUERY):
        batch = {"ids": several[start:start + _IDS_PER_QUERY]}
        for job_id, hosts in connection.execute(_HOSTS, batch):
            found[job_id]["hosts"] = f"{hosts} hosts"
    for start in range(0, len(resumed), _IDS_PER_QUERY):
        batch = {"ids": resumed[start:start + _IDS_PER_QUERY]}
        for job_id, worker in connection.execute(_WORKERS, batch):
            before = found[job_id].get("worker")
            found[job_id]["worker"] = f"{before}, {worker}" if before else worker
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


def _row(job: Mapping[str, Any], summary: Mapping[str, Any], varying: dict[str, Any],
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


